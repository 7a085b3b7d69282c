"""`atelier serve`: the HTTP API and the console, with its URL printed once it is up."""

from __future__ import annotations

import os
import threading
import time
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.panel import Panel

GRACEFUL_SHUTDOWN_SECONDS = 5
#: Seconds an idle keep-alive connection stays open. Longer than any client or proxy
#: keeps one for reuse (httpx, which the official SDK uses: 5 s; nginx's upstream
#: keep-alive: 60 s): at uvicorn's default of 5 s, a request sent on a connection at the
#: moment it turned 5 s idle was reset unread whenever the server's loop ran late,
#: and the client saw a `ReadError` with no response and no run
#: (`bench/bench_scale.py`: one of 300 streams started at once).
KEEP_ALIVE_SECONDS = 75


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    reload: Annotated[bool, typer.Option(help="Restart on code changes (development).")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=16,
            help="With DATABASE_URL: workers executing runs in this process (RUN_WORKERS, "
            "default 1); 0 serves the API only and leaves runs to `atelier worker`.",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API and the console, and print the console's URL once it is up."""
    import uvicorn

    if workers is not None:
        os.environ["RUN_WORKERS"] = str(workers)  # read by the app factory's Settings

    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    url = f"http://{shown_host}:{port}/"
    threading.Thread(target=_announce_when_up, args=(url,), daemon=True).start()
    if not reload:  # with --reload the app runs in a child process
        from app.heap import SERVER_MODULES, freeze_after_imports

        freeze_after_imports(SERVER_MODULES)
    # A stream lasts as long as the run it follows: without a bound, a stop would wait
    # for every watched run to finish. Runs cut short resume at the next start.
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        reload=reload,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


def _announce_when_up(url: str, interval: float = 0.25) -> None:
    """Print the console URL once the service is ready (`/ready` answers 200).

    Start-up has by then opened the database and, without `LLM_BASE_URL`, made the
    embedded model answer a completion: a model that crashes makes start-up fail
    with its one-line reason instead, and this never prints.
    """
    while True:
        try:
            ready = httpx.get(f"{url}ready", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            ready = False
        if not ready:
            time.sleep(interval)
            continue
        Console(stderr=True).print(
            Panel.fit(f"Atelier is up — open the console at [bold link={url}]{url}[/]")
        )
        return
