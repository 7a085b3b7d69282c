"""Run the Atelier app on a real uvicorn on 127.0.0.1 for service tests and benchmarks.

`LiveServer` serves an app built by `create_app(settings, assistant_factory=...)` in
a thread with its own event loop (like the scripted LLM server), so sync tests can
use `httpx` and the official `langgraph-sdk` client against it, and async tests
never share its loop. `ServerProcess` serves the same app from a child process
(`python -m tests.app.serve`), which a test can SIGKILL and start again.

Also: `read_sse` parses a raw SSE body into frames; `free_port` picks a port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import uvicorn

from app.main import create_app
from core.settings import Settings
from engine.assistants import AssistantFactory

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """Return a TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def service_settings(data_dir: Path, llm_base_url: str, **overrides: Any) -> Settings:
    """Settings for a service test: a private DATA_DIR, the scripted LLM, no retries."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "llm_base_url": llm_base_url,
        "llm_api_key": "test",
        "llm_model": "scripted",
        "llm_max_retries": 0,
        "llm_timeout": 30,
        "sse_heartbeat_interval": 15,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


class Served(Protocol):
    """A deployment a service test talks to over HTTP: one base URL."""

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:PORT."""
        ...


#: The deployments the service suites run against (`serve_deployment`).
DEPLOYMENTS = ["embedded", "scale-out", "processes"]


@contextlib.contextmanager
def serve_deployment(
    request: Any,
    settings: Callable[..., Settings],
    assistant_factory: AssistantFactory | None,
    headers: dict[str, str] | None = None,
    **app_options: Any,
) -> Iterator[Served]:
    """Serve a service-suite test in the deployment `request.param` (of `DEPLOYMENTS`).

    `app_options` go to `create_app` in the two in-process deployments (the
    processes' counterparts are the module's `processes` fixture's to set up).

    * "embedded": `settings()` (SQLite);
    * "scale-out": `settings(database_url=…, redis_url=…)`, on the throwaway
      PostgreSQL and Redis (tests/support/servers.py), the API and one worker in
      one process;
    * "processes": the module's `processes` fixture (two API replicas behind nginx and
      two worker processes, tests/app/scale/cluster.py), shared by its tests: after
      each, its runs are settled, the database's invariants checked and its data
      emptied (`after_test`, with `headers` for its requests). A test marked
      `in_process_only(reason)` is skipped there.
    """
    if request.param == "processes":
        reason = request.node.get_closest_marker("in_process_only")
        if reason is not None:
            import pytest

            pytest.skip(f"not against separate processes: {reason.args[0]}")
        deployment = request.getfixturevalue("processes")
        yield deployment
        deployment.after_test(headers)
        return
    scale: dict[str, Any] = {}
    if request.param == "scale-out":
        scale = {
            "database_url": request.getfixturevalue("migrated_postgres_url"),
            "redis_url": request.getfixturevalue("redis_server").url,
        }
    with LiveServer(settings(**scale), assistant_factory, **app_options) as live:
        yield live


@contextlib.contextmanager
def processes_deployment(
    request: Any, tmp_path_factory: Any, llm_base_url: str, **options: Any
) -> Iterator[Any]:
    """Two API replicas behind nginx and two workers, as processes (a module's `processes`).

    On the session's throwaway PostgreSQL and Redis (skips without the scale extra);
    `options` go to `tests.app.scale.cluster.proxied_cluster` (`cli`, `env`).
    """
    postgres = request.getfixturevalue("postgres_cluster")
    from tests.app.scale.cluster import proxied_cluster

    with proxied_cluster(
        postgres,
        request.getfixturevalue("redis_server"),
        tmp_path_factory.mktemp("processes"),
        llm_base_url,
        **options,
    ) as deployment:
        yield deployment


class LiveServer:
    """The app on a real uvicorn in a background thread."""

    def __init__(
        self,
        settings: Settings,
        assistant_factory: AssistantFactory | None,
        **app_options: Any,
    ) -> None:
        """Serve `create_app(settings, assistant_factory=..., **app_options)` once started."""
        self.settings = settings
        self.app = create_app(settings, assistant_factory=assistant_factory, **app_options)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:PORT."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> LiveServer:
        """Bind a free port, serve, and wait until the lifespan has run."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level="warning",
            access_log=False,
            ws="none",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        server = self._server
        self._thread = threading.Thread(
            target=lambda: server.run(sockets=[sock]), name=f"atelier-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the app failed to start (see the log)")
            if time.monotonic() > deadline:
                raise TimeoutError("the app did not start in 30 s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Shut down (runs in flight are left for recovery, as on a restart)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=20)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class ServerProcess:
    """The app served by a child process (`python -m tests.app.serve`), killable."""

    def __init__(
        self,
        data_dir: Path,
        llm_base_url: str,
        *,
        graphs: str = "sample",
        env: dict[str, str] | None = None,
    ) -> None:
        """Configure the child: its DATA_DIR, the LLM endpoint, the graphs, more settings."""
        self.data_dir = data_dir
        self.llm_base_url = llm_base_url
        self.graphs = graphs
        self.extra_env = env or {}
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        """Base URL of the child's server."""
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 60) -> ServerProcess:
        """Start the child and wait until it answers /ok."""
        env = {
            **os.environ,
            "DATA_DIR": str(self.data_dir),
            "LLM_BASE_URL": self.llm_base_url,
            "LLM_API_KEY": "test",
            "LLM_MODEL": "scripted",
            "LLM_MAX_RETRIES": "0",
            "AUTH_API_KEYS": "",
            "ATELIER_TEST_GRAPHS": self.graphs,
            "ATELIER_TEST_PORT": str(self.port),
            **self.extra_env,
        }
        with contextlib.suppress(KeyError):
            del env["PYTEST_CURRENT_TEST"]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.app.serve"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the child (no shutdown code runs) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the child politely (SIGTERM), then by force."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass(frozen=True)
class SseFrame:
    """One parsed SSE frame."""

    id: int | None
    event: str
    data: Any


def parse_sse(lines: Iterator[str]) -> Iterator[SseFrame | str]:
    """Parse SSE lines into frames; comments come out as strings (": heartbeat")."""
    event, data, frame_id = "", [], None
    for line in lines:
        if line == "":
            if event or data:
                yield SseFrame(frame_id, event, json.loads("\n".join(data)) if data else None)
            event, data, frame_id = "", [], None
        elif line.startswith(":"):
            yield line
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                frame_id = int(value)


def read_sse(text: str) -> list[SseFrame]:
    """Parse a whole SSE body into its frames (comments dropped)."""
    return [f for f in parse_sse(iter(text.split("\n"))) if isinstance(f, SseFrame)]


def wait_until(predicate: Any, timeout: float = 10, interval: float = 0.01) -> Any:
    """Return the predicate's first truthy value, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


__all__ = [
    "HOST",
    "LiveServer",
    "Served",
    "ServerProcess",
    "SseFrame",
    "free_port",
    "parse_sse",
    "read_sse",
    "service_settings",
    "wait_until",
]
