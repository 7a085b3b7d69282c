"""Serve the app for `harness.ServerProcess`: `python -m tests.app.serve`.

Configuration comes from the environment (DATA_DIR, LLM_BASE_URL, …) like the real
service; `ATELIER_TEST_GRAPHS` picks the graphs (`sample`: tests/app/sample_graphs.py,
`atelier`: the real pipeline) and `ATELIER_TEST_PORT` the port on 127.0.0.1.

`ATELIER_TEST_PAUSE_FIRST_COMMIT=<seconds>` makes the event log pause inside the
transaction of a run's very first frame (after its INSERT, before COMMIT), after
creating the file named by `ATELIER_TEST_MARKER`: a test can SIGKILL the server at
exactly that moment.

`ATELIER_TEST_CHECKOUT_TIMEOUT=<seconds>` sets how long work outside HTTP requests
waits for a PostgreSQL connection (`engine.postgres.pool.CHECKOUT_TIMEOUT`, 30 s), so a test
can outlast it without a 30-second outage.

`ATELIER_TEST_ROLE=worker` runs `atelier worker` instead (the scale-out deployment's
executor process, `cli.worker`), with the same graphs and no HTTP port.

`ATELIER_TEST_WEBHOOK_SECRETS` (JSON: owner id → its signing secrets, current first)
gives API keys webhook signing secrets of their own (`engine.MappingWebhookSecrets`),
as the key table will.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import uvicorn

from app.main import create_app
from cli.serve import KEEP_ALIVE_SECONDS
from core.settings import Settings


def pause_first_commits(seconds: float, marker: Path) -> None:
    """Hold each run's first event commit open for `seconds`, announcing it in `marker`."""
    from engine.sqlite.event_log import SqliteEventLog

    write_items = SqliteEventLog._write_items

    async def paused(db: Any, items: list[Any]) -> None:
        await write_items(db, items)
        if any(item.frame is not None and item.frame.id == 1 for item in items):
            await asyncio.to_thread(marker.write_text, "in the first commit\n")
            await asyncio.sleep(seconds)

    SqliteEventLog._write_items = staticmethod(paused)  # type: ignore[method-assign]


def main() -> None:
    """Build the app and serve it until killed."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    pause = os.environ.get("ATELIER_TEST_PAUSE_FIRST_COMMIT")
    if pause:
        pause_first_commits(float(pause), Path(os.environ["ATELIER_TEST_MARKER"]))
    checkout = os.environ.get("ATELIER_TEST_CHECKOUT_TIMEOUT")
    if checkout:
        from engine.postgres import pool

        pool.CHECKOUT_TIMEOUT = float(checkout)
    factory = None
    if os.environ.get("ATELIER_TEST_GRAPHS", "sample") == "sample":
        from tests.app.sample_graphs import sample_assistants

        factory = sample_assistants
    secrets = None
    if os.environ.get("ATELIER_TEST_WEBHOOK_SECRETS"):
        from engine import MappingWebhookSecrets

        secrets = MappingWebhookSecrets(json.loads(os.environ["ATELIER_TEST_WEBHOOK_SECRETS"]))
    if os.environ.get("ATELIER_TEST_ROLE") == "worker":
        from cli.worker import serve_worker

        settings = Settings()
        asyncio.run(
            serve_worker(
                settings,
                settings.run_worker_concurrency,
                assistant_factory=factory,
                webhook_secrets=secrets,
            )
        )
        return
    app = create_app(Settings(), assistant_factory=factory, webhook_secrets=secrets)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(os.environ["ATELIER_TEST_PORT"]),
        log_level="warning",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,  # as `atelier serve`
    )


if __name__ == "__main__":
    main()
