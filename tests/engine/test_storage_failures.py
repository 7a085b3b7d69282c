"""Storage failures: whatever the database does, a run either runs or ends, loudly.

The engine in-process over a real SQLite file and real graphs (the sample graphs
calling the scripted LLM). Two ways to make the event log's commit fail:

* a trigger that refuses some of a run's frames (a write that fails for good):
  the run must end with `error` (StorageError) + `end`, ids gapless, while a run
  writing beside it is untouched;
* another connection holding the write lock past the busy timeout and the retries
  (the database takes no writes at all): the run cannot even record its end, so it
  stays recoverable, its stream is told it stalled, and this process picks it up
  again once the lock is gone.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from app.sse import follow_run
from engine import Engine
from engine.sqlite import SqliteRunStorage
from engine.sqlite.backend import open_sqlite_backend
from tests.app.harness import read_sse, service_settings
from tests.app.sample_graphs import scripted_reply
from tests.engine.test_services import open_parts, start, until
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = pytest.mark.timeout(60)  # a regression here is a hang: fail it instead


class Counts:
    """The engine's run metrics, counted (what `atelier_active_runs` would show)."""

    def __init__(self) -> None:
        self.active = 0
        self.finished: list[str] = []

    def run_started(self) -> None:
        self.active += 1

    def run_finished(self, status: str, seconds: float) -> None:
        self.active -= 1
        self.finished.append(status)

    def run_left(self) -> None:
        self.active -= 1

    def observe_event(self, event: Any) -> None:
        pass


@pytest.fixture
def llm() -> Any:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@asynccontextmanager
async def open_failing_engine(
    tmp_path: Path, llm_url: str, counts: Counts
) -> AsyncIterator[tuple[Engine, SqliteRunStorage]]:
    """Open an engine and its storage (which the tests make fail), with short timeouts."""
    settings = service_settings(tmp_path, llm_url)
    backend = open_sqlite_backend(settings, owner="atelier run", busy_timeout=0.2, retry_for=0.5)
    async with open_parts(
        tmp_path, llm_url, metrics=counts, backend=backend, recovery_interval=0.3
    ) as parts:
        yield parts.engine, parts.storage


async def log_of(engine: Engine, run_id: str) -> list[tuple[int, str, Any]]:
    frames = await engine.runs.read_frames(run_id, 0)
    return [(f.id, f.event, json.loads(f.data)) for f in frames]


async def test_a_run_whose_frames_cannot_be_written_ends_with_error_and_end(
    tmp_path: Path, llm: Any
) -> None:
    # Regression: a failed commit was only logged; the run never ended.
    counts = Counts()
    async with open_failing_engine(tmp_path, llm.base_url, counts) as (engine, storage):
        await storage.database.execute(
            [
                (
                    "CREATE TRIGGER refuse BEFORE INSERT ON run_events WHEN NEW.event = 'updates' "
                    "BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END",
                    (),
                )
            ]
        )
        studio = {"request": "hi", "auto_confirm": True}
        failing = await start(engine, "studio", input=studio, modes=["updates", "custom"])
        beside = await start(engine, "studio", input=studio, modes=["custom"])
        done = await asyncio.wait_for(engine.runs.wait(failing.run_id), 20)
        other = await asyncio.wait_for(engine.runs.wait(beside.run_id), 20)

        assert done is not None and done.status == "error"
        assert done.error == {
            "error": "StorageError",
            "message": "the run's events could not be saved; the run was stopped",
        }
        frames = await log_of(engine, failing.run_id)
        assert [f[0] for f in frames] == list(range(1, len(frames) + 1)), frames
        assert [f[1] for f in frames][-2:] == ["error", "end"]
        assert frames[-1][2] == {"run_id": failing.run_id, "status": "error"}
        assert "updates" not in [f[1] for f in frames]
        # The run writing beside it in the same batches is untouched.
        assert other is not None and other.status == "success"
        assert (await log_of(engine, beside.run_id))[-1][1] == "end"
        thread = await engine.threads.get("anonymous", failing.thread_id)
        assert thread is not None and thread.status == "error"
        assert counts.active == 0 and sorted(counts.finished) == ["error", "success"]


async def test_a_run_that_cannot_even_record_its_end_is_resumed_when_writes_return(
    tmp_path: Path, llm: Any
) -> None:
    counts = Counts()
    async with open_failing_engine(tmp_path, llm.base_url, counts) as (engine, storage):
        run = await start(engine, "studio", input={"request": "hi", "auto_confirm": True})
        # Another connection takes the write lock before the run's first commit and
        # keeps it far past the busy timeout (0.2 s) and the retries (0.5 s).
        blocker = sqlite3.connect(storage.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        follower = follow_run(engine.runs, run.run_id, run.thread_id, heartbeat=0.1)
        seen = await asyncio.wait_for(
            asyncio.ensure_future(_collect(follower)), 15
        )  # a stream of the stuck run is told so and closed, not fed heartbeats forever
        assert seen.endswith(b"\n\n") and b"RunStalled" in seen.split(b"event: error\n")[-1]
        assert not engine.runs.is_active(run.run_id)
        record = await engine.runs.get("anonymous", run.thread_id, run.run_id)
        assert record is not None and record.status == "pending"  # still recoverable
        assert counts.active == 0  # this process is not executing it

        blocker.execute("COMMIT")  # the database takes writes again
        blocker.close()
        await until(lambda: engine.runs.is_active(run.run_id), 5)  # picked up by the sweep
        done = await asyncio.wait_for(engine.runs.wait(run.run_id), 20)
        assert done is not None and done.status == "success"
        frames = read_sse(
            b"".join([c async for c in follow_run(engine.runs, run.run_id, "t")]).decode()
        )
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        assert [f.event for f in frames].count("metadata") == 1  # nothing of the lost try
        assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
        assert counts.active == 0 and counts.finished == ["success"]


async def _collect(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])
