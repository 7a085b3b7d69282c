"""`langgraph dev` serves langgraph.json: `atelier` and `team` run to a post (issue 14).

The real `langgraph dev` (langgraph-cli[inmem], LangGraph's in-memory server and
how Studio opens a project) runs in a child process on a loopback port, with the
repository's `langgraph.json` copied unchanged into a scratch project directory
whose `.env` holds the settings, as a developer's would: the scripted OpenAI
server (`tests/app/atelier_llm.py`) as `LLM_BASE_URL`, a private `DATA_DIR`. Its
blocking-call detection is on (no `--allow-blocking`): a blocking call on the
event loop anywhere in a run fails that run with an `error` event, which fails
these tests. The official `langgraph-sdk` client drives it.

Nothing here needs the network: tracing, analytics and the version check are off,
and every address the server talks to is on loopback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from knowledge.repository import SqliteNoteRepository
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import HOST, free_port
from tests.support.fake_models import HAPPY_TITLE, README_REQUEST, STUDENT_NOTE
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUEST = README_REQUEST
NOTE = STUDENT_NOTE
#: What keeps `langgraph dev` off the network: no LangSmith tracing, no CLI
#: analytics, no PyPI version check (its license check is skipped without a key).
OFFLINE_ENV = {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
}
START_TIMEOUT = 180.0  # imports and start-up on a loaded 2-core CI machine


class LanggraphDev:
    """`langgraph dev --config langgraph.json` in a child process, in `project`."""

    def __init__(self, project: Path, *extra_args: str) -> None:
        """Serve the project directory (its langgraph.json and .env) on a free loopback port.

        `extra_args` go to `langgraph dev` (e.g. `--n-jobs-per-worker 50`).
        """
        self.project = project
        self.extra_args = extra_args
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = project / "langgraph-dev.log"
        self.process: subprocess.Popen[bytes] | None = None

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's output, for failure messages."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def __enter__(self) -> LanggraphDev:
        # A clean environment: the settings come from the project's .env, nothing
        # from the developer's shell; PYTHONPATH puts this checkout first.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.project),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO_ROOT),
            **OFFLINE_ENV,
        }
        command = [
            *(sys.executable, "-m", "langgraph_cli", "dev", "--config", "langgraph.json"),
            *("--host", HOST, "--port", str(self.port), "--no-browser", "--no-reload"),
            *self.extra_args,
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=self.project, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise TimeoutError(f"langgraph dev did not start:\n{self.log_tail()}")
            time.sleep(0.5)

    def __exit__(self, *_: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: lifespans close
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


@pytest.fixture
def server(tmp_path: Path, llm: ScriptedOpenAIServer) -> Iterator[LanggraphDev]:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO_ROOT / "langgraph.json", project / "langgraph.json")
    data_dir = tmp_path / "data"
    (project / ".env").write_text(
        f"LLM_BASE_URL={llm.base_url}\nLLM_API_KEY=test\nLLM_MODEL=scripted\n"
        f"LLM_MAX_RETRIES=0\nDATA_DIR={data_dir}\n",
        encoding="utf-8",
    )
    with LanggraphDev(project) as dev:
        yield dev
        log = dev.log_tail(100_000)
    assert "BlockingError" not in log, log[-4000:]
    assert "--allow-blocking, which allows" not in log  # detection stayed on


async def stream_run(
    url: str, graph: str, inputs: dict[str, Any], **kwargs: Any
) -> tuple[list[Any], dict[str, Any]]:
    """Stream one run on a new thread; return its parts and the thread's final values."""
    client = get_client(url=url)
    thread = await client.threads.create()
    parts = [
        part
        async for part in client.runs.stream(
            thread["thread_id"], graph, input=inputs, stream_mode=["values", "custom"], **kwargs
        )
    ]
    state = await client.threads.get_state(thread["thread_id"])
    return parts, state["values"]


def errors_of(parts: list[Any]) -> list[Any]:
    """The data of the stream's `error` events."""
    return [p.data for p in parts if p.event == "error"]


async def seed_note(data_dir: Path) -> None:
    """Put an approved note in the vault of `DATA_DIR`, which the server opened at start-up."""
    async with SqliteNoteRepository(data_dir / "atelier.db") as notes:
        await notes.add(NOTE)


async def test_langgraph_dev_streams_an_atelier_run_to_a_post(
    tmp_path: Path, llm: ScriptedOpenAIServer, server: LanggraphDev
) -> None:
    await seed_note(tmp_path / "data")  # the vault langgraph dev opened from .env
    inputs = {"request": REQUEST, "auto_confirm": True, "image_count": 1}
    parts, values = await stream_run(server.url, "atelier", inputs, stream_subgraphs=True)

    assert not errors_of(parts), errors_of(parts)
    assert parts[0].event == "metadata"
    result = values["result"]
    assert result["outcome"] == "completed", result
    assert result["post"]["title"] == HAPPY_TITLE and len(result["images"]) == 1
    custom = [p.data for p in parts if p.event.split("|")[0] == "custom"]
    injected = [e for e in custom if e["type"] == "knowledge.injected"]
    assert injected and [n["id"] for n in injected[0]["notes"]] == [NOTE.id]
    assert any(e["type"] == "asset.created" for e in custom)
    asset_id = result["images"][0]["asset_id"]
    assert list((tmp_path / "data" / "assets").glob(f"{asset_id}.png")), "stored in DATA_DIR"
    assert llm.call_count > 0


async def test_langgraph_dev_streams_a_team_run_and_applies_run_options(
    tmp_path: Path, llm: ScriptedOpenAIServer, server: LanggraphDev
) -> None:
    parts, values = await stream_run(server.url, "team", {"request": REQUEST, "image_count": 1})
    assert not errors_of(parts), errors_of(parts)
    assert values["generated_content"]["title"] == HAPPY_TITLE
    assert len(values["generated_image_asset_ids"]) == 1

    # The context schema the server offers (Studio's form) is the serializable one;
    # a value out of its range fails the run loudly instead of being ignored.
    client = get_client(url=server.url)
    (assistant,) = await client.assistants.search(graph_id="atelier")
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    assert set(schemas["context_schema"]["properties"]) == {
        "critic_pass_threshold",
        "critic_timeout",
    }
    parts, _ = await stream_run(
        server.url,
        "atelier",
        {"request": REQUEST, "auto_confirm": True},
        context={"critic_pass_threshold": 2},
    )
    assert errors_of(parts) and "critic_pass_threshold" in str(errors_of(parts))
