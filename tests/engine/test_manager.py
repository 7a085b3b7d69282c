"""The run manager in-process: execution, frames, cancel, rollback, strategies, recovery.

The graphs are real (tests/app/sample_graphs.py) and call the scripted LLM server
through the real model factory; the store and checkpointer are real SQLite files
(`engine.sqlite.backend`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agentkit.services import build_context
from app.errors import Conflict, Invalid, NotFound
from engine.hub import Hub
from engine.manager import RunManager
from engine.preparation import RunRequest
from engine.protocols import ExecutorSetup
from engine.reads import thread_config
from engine.records import RunRecord
from engine.sqlite import SqliteRunStorage
from engine.sqlite.backend import open_sqlite_backend
from providers.llm import OpenAIModelFactory
from tests.app.harness import service_settings
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.support.scripted_openai import ScriptedOpenAIServer

OWNER = "anonymous"


@pytest.fixture
def llm() -> Any:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@dataclass
class Parts:
    """A run manager and what it was built on, for the checks that look underneath it."""

    manager: RunManager
    storage: SqliteRunStorage
    checkpointer: AsyncSqliteSaver
    hub: Hub
    assistants: dict[str, Any]


@asynccontextmanager
async def open_manager(tmp_path: Path, llm_url: str, **limits: Any) -> AsyncIterator[RunManager]:
    async with open_parts(tmp_path, llm_url, **limits) as parts:
        yield parts.manager


@asynccontextmanager
async def open_parts(tmp_path: Path, llm_url: str, **limits: Any) -> AsyncIterator[Parts]:
    settings = service_settings(tmp_path, llm_url)
    context = build_context(settings, models=OpenAIModelFactory(settings))
    async with open_sqlite_backend(settings) as backend:
        assistants = sample_assistants(backend.checkpointer)
        setup = ExecutorSetup(
            assistants=assistants,
            context=context,
            run_timeout=limits.get("run_timeout", 30),
        )
        manager = RunManager(
            backend=backend, setup=setup, max_attempts=limits.get("max_attempts", 3)
        )
        async with manager:
            yield Parts(manager, backend.storage, backend.checkpointer, backend.live, assistants)


async def start(
    manager: RunManager,
    assistant: str,
    *,
    thread_id: str | None = None,
    input: dict[str, Any] | None = None,
    command: dict[str, Any] | None = None,
    strategy: str = "reject",
    modes: list[str] | None = None,
    if_not_exists: str = "create",
) -> Any:
    run, created = await manager.create(
        RunRequest(
            owner=OWNER,
            thread_id=thread_id,
            assistant=manager.assistant(assistant),
            kwargs={
                "input": input,
                "command": command,
                "stream_mode": modes or ["updates", "custom"],
                "stream_subgraphs": True,
                "config": {},
            },
            metadata={},
            multitask_strategy=strategy,
            if_not_exists=if_not_exists,
        )
    )
    assert created
    return run


async def until(check: Callable[[], Any], seconds: float = 10) -> None:
    """Wait until `check()` (sync or async) is true."""
    for _ in range(int(seconds / 0.02)):
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"condition not met within {seconds} s")


async def steps_done(manager: RunManager, thread_id: str) -> int:
    graph = manager.assistant("slow").graph
    state = await graph.aget_state(thread_config(thread_id))
    return len(state.values.get("done") or [])


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def frames_of(manager: RunManager, run_id: str) -> list[tuple[int, str, Any]]:
    """Return a run's committed frames (an ended run's are all committed)."""
    return [(f.id, f.event, json.loads(f.data)) for f in await manager.read_frames(run_id, 0)]


async def record_of(manager: RunManager, run: RunRecord) -> RunRecord:
    """Return a run's record as stored now."""
    return await manager.get_run(OWNER, run.thread_id, run.run_id)


async def test_a_run_streams_metadata_events_and_end_with_consecutive_ids(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "studio", input={"request": "hi", "auto_confirm": True})
        done = await manager.wait(run.run_id)
        assert done is not None and done.status == "success" and done.attempt == 1
        frames = await frames_of(manager, run.run_id)
        assert [f[0] for f in frames] == list(range(1, len(frames) + 1))
        assert frames[0][1] == "metadata"
        assert frames[0][2] == {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "attempt": 1,
            "schema_version": 1,
        }
        assert frames[-1] == (len(frames), "end", {"run_id": run.run_id, "status": "success"})
        events = [f[1] for f in frames]
        assert any(e.startswith("custom|executor:") for e in events)
        assert "updates" in events
        thread = await manager.get_thread(OWNER, run.thread_id)
        assert thread is not None and thread.status == "idle"
        assert thread.values and thread.values["result"]["outcome"] == "completed"


async def test_a_failed_run_ends_with_error_then_end_and_hides_internals(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "boom", input={"x": 1})
        done = await manager.wait(run.run_id)
        assert done is not None and done.status == "error"
        frames = await frames_of(manager, run.run_id)
        assert [f[1] for f in frames[-2:]] == ["error", "end"]
        error = frames[-2][2]
        assert error["error"] == "RuntimeError"
        assert "secret" not in error["message"] and "/srv" not in error["message"]
        assert await manager.result(done) == {"__error__": error}


async def test_cancel_interrupts_at_once_and_no_llm_call_follows(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "slow", input={"steps": 20, "delay": 0.5})
        await until(lambda: llm.call_count >= 2)
        started = time.monotonic()
        record = await manager.cancel(await record_of(manager, run), "interrupt", wait=True)
        assert time.monotonic() - started < 1.0
        assert record.status == "interrupted" and record.cancel_reason == "interrupt"
        calls = llm.call_count
        await asyncio.sleep(1.2)
        assert llm.call_count == calls
        frames = await frames_of(manager, run.run_id)
        assert frames[-1][2] == {"run_id": run.run_id, "status": "interrupted"}
        # The checkpoint of the finished steps is kept.
        state = await manager.assistant("slow").graph.aget_state(thread_config(run.thread_id))
        assert state.values.get("done")


async def test_a_cancel_in_the_step_that_started_the_run_still_ends_it(
    tmp_path: Path, llm: Any
) -> None:
    """A worker cancels a run it just claimed when its cancel was asked while it was pending.

    Its task has not taken a step then: cancelling the task itself would skip its body,
    and the run would never end (nor its thread ever take another run).
    """
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "slow", input={"steps": 5, "delay": 0.2})
        manager.executor.cancel(run.run_id, "interrupt")  # no await since the start
        async with asyncio.timeout(10):
            await manager.executor.wait(run.run_id)
        record = await record_of(manager, run)
        assert record is not None
        assert record.status == "interrupted" and record.cancel_reason == "interrupt"
        frames = await frames_of(manager, run.run_id)
        assert [f[1] for f in frames] == ["metadata", "end"]
        assert frames[-1][2] == {"run_id": run.run_id, "status": "interrupted"}
        again = await start(manager, "slow", thread_id=run.thread_id, input={"steps": 1})
        done = await manager.wait(again.run_id)
        assert done is not None and done.status == "success"


async def test_rollback_removes_the_checkpoints_the_run_wrote(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        first = await start(manager, "slow", input={"steps": 1, "delay": 0.01})
        await manager.wait(first.run_id)
        graph = manager.assistant("slow").graph
        config = thread_config(first.thread_id)
        before = (await graph.aget_state(config)).values
        run = await start(
            manager, "slow", thread_id=first.thread_id, input={"steps": 20, "delay": 0.3}
        )
        await until(lambda: _at_least(steps_done(manager, run.thread_id), 2))
        await manager.cancel(await record_of(manager, run), "rollback", wait=True)
        assert (await graph.aget_state(config)).values == before


async def test_reject_names_the_active_run_and_enqueue_runs_after_it(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        first = await start(manager, "slow", input={"steps": 2, "delay": 0.2})
        with pytest.raises(Conflict, match=first.run_id):
            await start(manager, "slow", thread_id=first.thread_id, input={"steps": 1})
        queued = await start(
            manager,
            "slow",
            thread_id=first.thread_id,
            input={"steps": 1, "delay": 0.01},
            strategy="enqueue",
        )
        done = await manager.wait(queued.run_id)
        first_done = await record_of(manager, first)
        assert first_done.status == "success" and done.status == "success"
        assert first_done.finished_at <= done.finished_at


async def test_interrupt_strategy_stops_the_active_run_first(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        first = await start(manager, "slow", input={"steps": 20, "delay": 0.3})
        second = await start(
            manager,
            "slow",
            thread_id=first.thread_id,
            input={"steps": 1, "delay": 0.01},
            strategy="interrupt",
        )
        assert (await record_of(manager, first)).status == "interrupted"
        assert (await manager.wait(second.run_id)).status == "success"


async def test_human_in_the_loop_interrupt_then_resume(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "studio", input={"request": "hi"})
        done = await manager.wait(run.run_id)
        assert done.status == "interrupted"
        values = await manager.result(done)
        assert values["__interrupt__"][0]["value"]["type"] == "clarification"
        thread = await manager.get_thread(OWNER, run.thread_id)
        assert thread.status == "interrupted"
        frames = await frames_of(manager, run.run_id)
        assert any(e == "updates" and "__interrupt__" in d for _, e, d in frames)

        with pytest.raises(Invalid, match="clarification"):
            await start(manager, "studio", thread_id=run.thread_id, command={"resume": 42})
        with pytest.raises(Invalid, match="unknown interrupt ids"):
            await start(
                manager, "studio", thread_id=run.thread_id, command={"resume": {"0" * 32: "x"}}
            )
        resumed = await start(
            manager, "studio", thread_id=run.thread_id, command={"resume": "defaults"}
        )
        assert (await manager.wait(resumed.run_id)).status == "success"
        with pytest.raises(Conflict, match="no pending interrupt"):
            await start(manager, "studio", thread_id=run.thread_id, command={"resume": "defaults"})


async def test_a_run_past_its_deadline_times_out_with_error_and_end(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url, run_timeout=0.5) as manager:
        run = await start(manager, "slow", input={"steps": 5, "delay": 0.4})
        done = await manager.wait(run.run_id)
        assert done.status == "timeout"
        frames = await frames_of(manager, run.run_id)
        assert [f[1] for f in frames[-2:]] == ["error", "end"]
        assert "RUN_TIMEOUT" in frames[-2][2]["message"]


async def test_unknown_threads_and_assistants_are_not_found(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        with pytest.raises(NotFound, match="nope"):
            manager.assistant("nope")
        with pytest.raises(NotFound):
            await start(
                manager, "burst", thread_id="missing", input={"count": 1}, if_not_exists="reject"
            )
        assert await manager.search_threads(OWNER) == []


async def test_runs_in_flight_at_shutdown_resume_at_the_next_start(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        run = await start(manager, "slow", input={"steps": 4, "delay": 0.3})
        await until(lambda: _at_least(steps_done(manager, run.thread_id), 2))
    # The manager stopped with the run in flight: its record still says running.
    calls_before = llm.call_count
    async with open_manager(tmp_path, llm.base_url) as manager:
        done = await manager.wait(run.run_id)
        assert done.status == "success" and done.attempt == 2
        state = await manager.assistant("slow").graph.aget_state(thread_config(run.thread_id))
        assert state.values["done"] == [1, 2, 3, 4]
        assert llm.call_count - calls_before <= 2  # steps 1-2 were not redone
        frames = await frames_of(manager, run.run_id)
        assert [f[0] for f in frames] == list(range(1, len(frames) + 1))
        metadata = [d["attempt"] for _, e, d in frames if e == "metadata"]
        assert metadata == [1, 2]
        assert [e for _, e, _ in frames].count("end") == 1


async def test_a_run_that_keeps_dying_is_abandoned_after_max_attempts(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url, max_attempts=1) as manager:
        run = await start(manager, "slow", input={"steps": 3, "delay": 0.3})
        await until(lambda: llm.call_count >= 1)
    async with open_manager(tmp_path, llm.base_url, max_attempts=1) as manager:
        record = await record_of(manager, run)
        assert record.status == "error" and record.error["error"] == "RunAbandoned"
        frames = await frames_of(manager, run.run_id)
        assert [e for _, e, _ in frames][-2:] == ["error", "end"]


@pytest.mark.parametrize("how", ["interrupt", "shutdown"])
async def test_a_cancel_during_a_checkpoint_write_never_leaves_the_database_locked(
    tmp_path: Path, llm: Any, how: str
) -> None:
    # Regression: a cancel landing between the saver's INSERT and its COMMIT left its
    # connection in a write transaction, and the event log then failed with "database
    # is locked" (about one cancel in six, right after a step starts: LangGraph writes
    # the previous checkpoint in the background while the next step runs).
    for attempt in range(20):
        (tmp_path / str(attempt)).mkdir()
        async with open_parts(tmp_path / str(attempt), llm.base_url) as parts:
            manager = parts.manager
            calls = llm.call_count
            run = await start(manager, "slow", input={"steps": 3, "delay": 0.3})
            await until(lambda calls=calls: llm.call_count > calls)
            if how == "shutdown":
                await manager.shutdown()
            else:
                record = await record_of(manager, run)
                await manager.cancel(record, "interrupt", wait=True)
            assert not parts.checkpointer.conn.in_transaction
            started = time.monotonic()
            await parts.storage.database.execute(
                [("UPDATE runs SET metadata = '{}' WHERE run_id = ?", (run.run_id,))]
            )
            assert time.monotonic() - started < 1.0


async def test_the_manager_is_the_only_door_and_exposes_no_repository(
    tmp_path: Path, llm: Any
) -> None:
    async with open_parts(tmp_path, llm.base_url) as parts:
        storage = parts.storage
        hidden = [
            storage,
            storage.threads,
            storage.runs,
            storage.events,
            parts.checkpointer,
            parts.hub,
            parts.assistants,
        ]
        public = {k: v for k, v in vars(parts.manager).items() if not k.startswith("_")}
        leaked = [k for k, v in public.items() if any(v is part for part in hidden)]
        assert leaked == []


async def test_threads_through_the_manager(tmp_path: Path, llm: Any) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        thread = await manager.create_thread(OWNER, "t1", {"user": "u1"})
        assert (await manager.create_thread(OWNER, "t1", {}, if_exists="do_nothing")) == thread
        with pytest.raises(Conflict, match="already exists"):
            await manager.create_thread(OWNER, "t1", {})
        with pytest.raises(Conflict, match="already exists"):
            await manager.create_thread("mallory", "t1", {}, if_exists="do_nothing")
        with pytest.raises(NotFound):
            await manager.get_thread("mallory", "t1")
        await asyncio.gather(
            manager.patch_thread(OWNER, "t1", {"a": 1}), manager.patch_thread(OWNER, "t1", {"b": 2})
        )
        assert (await manager.get_thread(OWNER, "t1")).metadata == {"user": "u1", "a": 1, "b": 2}
        with pytest.raises(NotFound):
            await manager.patch_thread("mallory", "t1", {"c": 3})
        assert await manager.count_threads(OWNER, metadata={"a": 1}) == 1
        assert await manager.count_threads("mallory") == 0
        # No graph ran on it yet: an empty state, no history, no checkpoint.
        assert (await manager.thread_state(OWNER, "t1"))["values"] == {}
        assert await manager.thread_history(OWNER, "t1", limit=5) == []
        with pytest.raises(NotFound, match="'c1'"):
            await manager.thread_state_at(OWNER, "t1", {"checkpoint_id": "c1"})
        with pytest.raises(Conflict, match="no graph yet"):
            await manager.update_state(OWNER, "t1", {}, as_node=None, checkpoint=None)
        with pytest.raises(NotFound):
            await manager.list_runs("mallory", "t1")

        run = await start(manager, "slow", thread_id="t1", input={"steps": 1, "delay": 0.01})
        assert (await manager.join(run.run_id))["done"] == [1]
        assert [r.run_id for r in await manager.list_runs(OWNER, "t1")] == [run.run_id]
        state = await manager.thread_state(OWNER, "t1")
        assert state["values"]["done"] == [1] and state["checkpoint"]["checkpoint_id"]
        history = await manager.thread_history(OWNER, "t1", limit=2)
        assert history[0]["checkpoint"] == state["checkpoint"]
        earlier = history[1]["checkpoint"]["checkpoint_id"]
        at = await manager.thread_state_at(OWNER, "t1", {"checkpoint_id": earlier})
        assert at["checkpoint"]["checkpoint_id"] == earlier
        copy = await manager.copy_thread(OWNER, "t1")
        assert (await manager.thread_state(OWNER, copy.thread_id))["values"]["done"] == [1]
        with pytest.raises(NotFound):
            await manager.get_run(OWNER, copy.thread_id, run.run_id)
        await manager.delete_run(OWNER, "t1", run.run_id)
        assert await manager.list_runs(OWNER, "t1") == []
        await manager.delete_thread(OWNER, "t1")
        with pytest.raises(NotFound):
            await manager.thread_state(OWNER, "t1")
