"""The engine's services in-process: execution, frames, cancel, rollback, strategies, recovery.

The engine is opened by its one opener (`engine.open_engine`); the graphs are real
(tests/app/sample_graphs.py) and call the scripted LLM server through the real model
factory; the store and checkpointer are real SQLite files (`engine.sqlite.backend`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agentkit.services import build_context
from app.composition import KeywordRanker
from app.errors import Conflict, Invalid, NotFound
from engine import Engine, RunSpec, open_engine
from engine.hub import Hub
from engine.reads import thread_config
from engine.records import RunRecord
from engine.sqlite import SqliteRunStorage
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
    """An engine and what it was built on, for the checks that look underneath it."""

    engine: Engine
    storage: SqliteRunStorage
    checkpointer: AsyncSqliteSaver
    hub: Hub
    assistants: Mapping[str, Any]


@asynccontextmanager
async def fixed_context(context: Any) -> AsyncIterator[Any]:
    """Open nothing: yield a context built already (the engine's `context` opener)."""
    yield context


@asynccontextmanager
async def open_test_engine(tmp_path: Path, llm_url: str, **limits: Any) -> AsyncIterator[Engine]:
    async with open_parts(tmp_path, llm_url, **limits) as parts:
        yield parts.engine


@asynccontextmanager
async def open_parts(tmp_path: Path, llm_url: str, **limits: Any) -> AsyncIterator[Parts]:
    settings = service_settings(tmp_path, llm_url).model_copy(
        update={
            "run_timeout": limits.get("run_timeout", 30),
            "run_max_attempts": limits.get("max_attempts", 3),
        }
    )
    context = build_context(settings, models=OpenAIModelFactory(settings))
    async with open_engine(
        settings,
        role="run",
        assistants=sample_assistants,
        context=lambda _pools: fixed_context(context),
        ranker=KeywordRanker(),
        metrics=limits.get("metrics"),
        backend=limits.get("backend"),
        recovery_interval=limits.get("recovery_interval", 5.0),
    ) as engine:
        core = engine.core
        storage = core.storage
        assert isinstance(storage, SqliteRunStorage)
        assert isinstance(core.checkpointer, AsyncSqliteSaver) and isinstance(core.live, Hub)
        yield Parts(engine, storage, core.checkpointer, core.live, core.builtins)


async def start(
    engine: Engine,
    assistant: str,
    *,
    thread_id: str | None = None,
    input: dict[str, Any] | None = None,
    command: dict[str, Any] | None = None,
    strategy: str = "reject",
    modes: list[str] | None = None,
    if_not_exists: str = "create",
) -> Any:
    run, created = await engine.runs.create(
        RunSpec(
            assistant_id=assistant,
            owner=OWNER,
            thread_id=thread_id,
            input=input,
            command=command,
            stream_mode=tuple(modes or ["updates", "custom"]),
            stream_subgraphs=True,
            multitask_strategy=strategy,  # type: ignore[arg-type]
            if_not_exists=if_not_exists,  # type: ignore[arg-type]
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


async def steps_done(engine: Engine, thread_id: str) -> int:
    graph = engine.assistants.builtin("slow").graph
    state = await graph.aget_state(thread_config(thread_id))
    return len(state.values.get("done") or [])


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def frames_of(engine: Engine, run_id: str) -> list[tuple[int, str, Any]]:
    """Return a run's committed frames (an ended run's are all committed)."""
    return [(f.id, f.event, json.loads(f.data)) for f in await engine.runs.read_frames(run_id, 0)]


async def record_of(engine: Engine, run: RunRecord) -> RunRecord:
    """Return a run's record as stored now."""
    return await engine.runs.get(OWNER, run.thread_id, run.run_id)


async def test_a_run_streams_metadata_events_and_end_with_consecutive_ids(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "studio", input={"request": "hi", "auto_confirm": True})
        done = await engine.runs.wait(run.run_id)
        assert done is not None and done.status == "success" and done.attempt == 1
        frames = await frames_of(engine, run.run_id)
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
        thread = await engine.threads.get(OWNER, run.thread_id)
        assert thread is not None and thread.status == "idle"
        assert thread.values and thread.values["result"]["outcome"] == "completed"


async def test_a_failed_run_ends_with_error_then_end_and_hides_internals(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "boom", input={"x": 1})
        done = await engine.runs.wait(run.run_id)
        assert done is not None and done.status == "error"
        frames = await frames_of(engine, run.run_id)
        assert [f[1] for f in frames[-2:]] == ["error", "end"]
        error = frames[-2][2]
        assert error["error"] == "RuntimeError"
        assert "secret" not in error["message"] and "/srv" not in error["message"]
        assert await engine.runs.result(done) == {"__error__": error}


async def test_cancel_interrupts_at_once_and_no_llm_call_follows(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "slow", input={"steps": 20, "delay": 0.5})
        await until(lambda: llm.call_count >= 2)
        started = time.monotonic()
        record = await engine.runs.cancel(await record_of(engine, run), "interrupt", wait=True)
        assert time.monotonic() - started < 1.0
        assert record.status == "interrupted" and record.cancel_reason == "interrupt"
        calls = llm.call_count
        await asyncio.sleep(1.2)
        assert llm.call_count == calls
        frames = await frames_of(engine, run.run_id)
        assert frames[-1][2] == {"run_id": run.run_id, "status": "interrupted"}
        # The checkpoint of the finished steps is kept.
        state = await engine.assistants.builtin("slow").graph.aget_state(
            thread_config(run.thread_id)
        )
        assert state.values.get("done")


async def test_a_cancel_in_the_step_that_started_the_run_still_ends_it(
    tmp_path: Path, llm: Any
) -> None:
    """A worker cancels a run it just claimed when its cancel was asked while it was pending.

    Its task has not taken a step then: cancelling the task itself would skip its body,
    and the run would never end (nor its thread ever take another run).
    """
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "slow", input={"steps": 5, "delay": 0.2})
        engine.core.executor.cancel(run.run_id, "interrupt")  # no await since the start
        async with asyncio.timeout(10):
            await engine.core.executor.wait(run.run_id)
        record = await record_of(engine, run)
        assert record is not None
        assert record.status == "interrupted" and record.cancel_reason == "interrupt"
        frames = await frames_of(engine, run.run_id)
        assert [f[1] for f in frames] == ["metadata", "end"]
        assert frames[-1][2] == {"run_id": run.run_id, "status": "interrupted"}
        again = await start(engine, "slow", thread_id=run.thread_id, input={"steps": 1})
        done = await engine.runs.wait(again.run_id)
        assert done is not None and done.status == "success"


async def test_rollback_removes_the_checkpoints_the_run_wrote(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        first = await start(engine, "slow", input={"steps": 1, "delay": 0.01})
        await engine.runs.wait(first.run_id)
        graph = engine.assistants.builtin("slow").graph
        config = thread_config(first.thread_id)
        before = (await graph.aget_state(config)).values
        run = await start(
            engine, "slow", thread_id=first.thread_id, input={"steps": 20, "delay": 0.3}
        )
        await until(lambda: _at_least(steps_done(engine, run.thread_id), 2))
        await engine.runs.cancel(await record_of(engine, run), "rollback", wait=True)
        assert (await graph.aget_state(config)).values == before


async def test_reject_names_the_active_run_and_enqueue_runs_after_it(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        first = await start(engine, "slow", input={"steps": 2, "delay": 0.2})
        with pytest.raises(Conflict, match=first.run_id):
            await start(engine, "slow", thread_id=first.thread_id, input={"steps": 1})
        queued = await start(
            engine,
            "slow",
            thread_id=first.thread_id,
            input={"steps": 1, "delay": 0.01},
            strategy="enqueue",
        )
        done = await engine.runs.wait(queued.run_id)
        first_done = await record_of(engine, first)
        assert first_done.status == "success" and done.status == "success"
        assert first_done.finished_at <= done.finished_at


async def test_interrupt_strategy_stops_the_active_run_first(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        first = await start(engine, "slow", input={"steps": 20, "delay": 0.3})
        second = await start(
            engine,
            "slow",
            thread_id=first.thread_id,
            input={"steps": 1, "delay": 0.01},
            strategy="interrupt",
        )
        assert (await record_of(engine, first)).status == "interrupted"
        assert (await engine.runs.wait(second.run_id)).status == "success"


async def test_human_in_the_loop_interrupt_then_resume(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "studio", input={"request": "hi"})
        done = await engine.runs.wait(run.run_id)
        assert done.status == "interrupted"
        values = await engine.runs.result(done)
        assert values["__interrupt__"][0]["value"]["type"] == "clarification"
        thread = await engine.threads.get(OWNER, run.thread_id)
        assert thread.status == "interrupted"
        frames = await frames_of(engine, run.run_id)
        assert any(e == "updates" and "__interrupt__" in d for _, e, d in frames)

        with pytest.raises(Invalid, match="clarification"):
            await start(engine, "studio", thread_id=run.thread_id, command={"resume": 42})
        with pytest.raises(Invalid, match="unknown interrupt ids"):
            await start(
                engine, "studio", thread_id=run.thread_id, command={"resume": {"0" * 32: "x"}}
            )
        resumed = await start(
            engine, "studio", thread_id=run.thread_id, command={"resume": "defaults"}
        )
        assert (await engine.runs.wait(resumed.run_id)).status == "success"
        with pytest.raises(Conflict, match="no pending interrupt"):
            await start(engine, "studio", thread_id=run.thread_id, command={"resume": "defaults"})


async def test_a_run_past_its_deadline_times_out_with_error_and_end(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url, run_timeout=0.5) as engine:
        run = await start(engine, "slow", input={"steps": 5, "delay": 0.4})
        done = await engine.runs.wait(run.run_id)
        assert done.status == "timeout"
        frames = await frames_of(engine, run.run_id)
        assert [f[1] for f in frames[-2:]] == ["error", "end"]
        assert "RUN_TIMEOUT" in frames[-2][2]["message"]


async def test_unknown_threads_and_assistants_are_not_found(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        with pytest.raises(NotFound, match="nope"):
            engine.assistants.builtin("nope")
        with pytest.raises(NotFound):
            await start(
                engine, "burst", thread_id="missing", input={"count": 1}, if_not_exists="reject"
            )
        assert await engine.threads.search(OWNER) == []


async def test_runs_in_flight_at_shutdown_resume_at_the_next_start(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        run = await start(engine, "slow", input={"steps": 4, "delay": 0.3})
        await until(lambda: _at_least(steps_done(engine, run.thread_id), 2))
    # The engine stopped with the run in flight: its record still says running.
    calls_before = llm.call_count
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        done = await engine.runs.wait(run.run_id)
        assert done.status == "success" and done.attempt == 2
        state = await engine.assistants.builtin("slow").graph.aget_state(
            thread_config(run.thread_id)
        )
        assert state.values["done"] == [1, 2, 3, 4]
        assert llm.call_count - calls_before <= 2  # steps 1-2 were not redone
        frames = await frames_of(engine, run.run_id)
        assert [f[0] for f in frames] == list(range(1, len(frames) + 1))
        metadata = [d["attempt"] for _, e, d in frames if e == "metadata"]
        assert metadata == [1, 2]
        assert [e for _, e, _ in frames].count("end") == 1


async def test_a_run_that_keeps_dying_is_abandoned_after_max_attempts(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url, max_attempts=1) as engine:
        run = await start(engine, "slow", input={"steps": 3, "delay": 0.3})
        await until(lambda: llm.call_count >= 1)
    async with open_test_engine(tmp_path, llm.base_url, max_attempts=1) as engine:
        record = await record_of(engine, run)
        assert record.status == "error" and record.error["error"] == "RunAbandoned"
        frames = await frames_of(engine, run.run_id)
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
            engine = parts.engine
            calls = llm.call_count
            run = await start(engine, "slow", input={"steps": 3, "delay": 0.3})
            await until(lambda calls=calls: llm.call_count > calls)
            if how == "shutdown":
                await engine.core.shutdown()
            else:
                record = await record_of(engine, run)
                await engine.runs.cancel(record, "interrupt", wait=True)
            assert not parts.checkpointer.conn.in_transaction
            started = time.monotonic()
            await parts.storage.database.execute(
                [("UPDATE runs SET metadata = '{}' WHERE run_id = ?", (run.run_id,))]
            )
            assert time.monotonic() - started < 1.0


async def test_no_service_exposes_a_repository(tmp_path: Path, llm: Any) -> None:
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
        engine = parts.engine
        services = {
            "runs": engine.runs,
            "threads": engine.threads,
            "assistants": engine.assistants,
            "crons": engine.crons,
            "feedback": engine.feedback,
            "webhooks": engine.webhooks,
            "retention": engine.retention,
        }
        leaked = [
            f"{name}.{k}"
            for name, service in services.items()
            for k, v in vars(service).items()
            if not k.startswith("_") and any(v is part for part in hidden)
        ]
        assert leaked == []


async def test_threads_through_the_services(tmp_path: Path, llm: Any) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        thread = await engine.threads.create(OWNER, "t1", {"user": "u1"})
        assert (await engine.threads.create(OWNER, "t1", {}, if_exists="do_nothing")) == thread
        with pytest.raises(Conflict, match="already exists"):
            await engine.threads.create(OWNER, "t1", {})
        with pytest.raises(Conflict, match="already exists"):
            await engine.threads.create("mallory", "t1", {}, if_exists="do_nothing")
        with pytest.raises(NotFound):
            await engine.threads.get("mallory", "t1")
        await asyncio.gather(
            engine.threads.patch(OWNER, "t1", {"a": 1}), engine.threads.patch(OWNER, "t1", {"b": 2})
        )
        assert (await engine.threads.get(OWNER, "t1")).metadata == {"user": "u1", "a": 1, "b": 2}
        with pytest.raises(NotFound):
            await engine.threads.patch("mallory", "t1", {"c": 3})
        assert await engine.threads.count(OWNER, metadata={"a": 1}) == 1
        assert await engine.threads.count("mallory") == 0
        # No graph ran on it yet: an empty state, no history, no checkpoint.
        assert (await engine.threads.state(OWNER, "t1"))["values"] == {}
        assert await engine.threads.history(OWNER, "t1", limit=5) == []
        with pytest.raises(NotFound, match="'c1'"):
            await engine.threads.state_at(OWNER, "t1", {"checkpoint_id": "c1"})
        with pytest.raises(Conflict, match="no graph yet"):
            await engine.threads.update_state(OWNER, "t1", {}, as_node=None, checkpoint=None)
        with pytest.raises(NotFound):
            await engine.runs.for_thread("mallory", "t1")

        run = await start(engine, "slow", thread_id="t1", input={"steps": 1, "delay": 0.01})
        assert (await engine.runs.join(run.run_id))["done"] == [1]
        assert [r.run_id for r in await engine.runs.for_thread(OWNER, "t1")] == [run.run_id]
        state = await engine.threads.state(OWNER, "t1")
        assert state["values"]["done"] == [1] and state["checkpoint"]["checkpoint_id"]
        history = await engine.threads.history(OWNER, "t1", limit=2)
        assert history[0]["checkpoint"] == state["checkpoint"]
        earlier = history[1]["checkpoint"]["checkpoint_id"]
        at = await engine.threads.state_at(OWNER, "t1", {"checkpoint_id": earlier})
        assert at["checkpoint"]["checkpoint_id"] == earlier
        copy = await engine.threads.copy(OWNER, "t1")
        assert (await engine.threads.state(OWNER, copy.thread_id))["values"]["done"] == [1]
        with pytest.raises(NotFound):
            await engine.runs.get(OWNER, copy.thread_id, run.run_id)
        await engine.runs.delete(OWNER, "t1", run.run_id)
        assert await engine.runs.for_thread(OWNER, "t1") == []
        await engine.threads.delete(OWNER, "t1")
        with pytest.raises(NotFound):
            await engine.threads.state(OWNER, "t1")


async def test_a_worker_needs_the_shared_queue(tmp_path: Path) -> None:
    settings = service_settings(tmp_path, "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="DATABASE_URL"):
        async with open_engine(
            settings,
            role="worker",
            assistants=sample_assistants,
            context=lambda _pools: fixed_context(None),
            ranker=KeywordRanker(),
        ):
            pass
    assert not (tmp_path / "atelier.lock").exists(), "nothing was opened"


async def test_atelier_run_fires_no_cron_and_serve_does(tmp_path: Path, llm: Any) -> None:
    async with open_parts(tmp_path / "run", llm.base_url) as parts:
        assert parts.engine.crons.scheduler._task is None  # `atelier run` fires none
    settings = service_settings(tmp_path / "serve", llm.base_url)
    context = build_context(settings, models=OpenAIModelFactory(settings))
    async with open_engine(
        settings,
        role="serve",
        assistants=sample_assistants,
        context=lambda _pools: fixed_context(context),
        ranker=KeywordRanker(),
    ) as engine:
        assert engine.crons.scheduler._task is not None  # CRON_SCHEDULER is on by default
    assert engine.crons.scheduler._task is None  # stopped as the engine closed


async def test_a_run_a_previous_version_recorded_loads_and_runs(tmp_path: Path, llm: Any) -> None:
    # A pending run whose row holds the `kwargs` an older version wrote (an MCP call's:
    # no command, no stream options): the next start recovers it and runs it as it was.
    old_kwargs = '{"input": {"steps": 1, "delay": 0.01}, "stream_mode": ["custom"], "config": {}}'
    async with open_parts(tmp_path, llm.base_url) as parts:
        thread = await parts.engine.threads.create(OWNER, None, {"graph_id": "slow"})
        stamp = thread.created_at
        await parts.storage.database.execute(
            [
                (
                    "INSERT INTO runs (run_id, thread_id, owner, assistant_id, status, "
                    "created_at, updated_at, kwargs, multitask_strategy) "
                    "VALUES ('old-run', ?, ?, 'slow', 'pending', ?, ?, ?, 'reject')",
                    (thread.thread_id, OWNER, stamp, stamp, old_kwargs),
                )
            ]
        )
        await parts.engine.core.shutdown()
    async with open_test_engine(tmp_path, llm.base_url) as engine:  # recovers it
        ended = await asyncio.wait_for(engine.runs.wait("old-run"), 20)
        assert ended is not None and ended.status == "success", ended
        assert ended.options.stream_mode == ("custom",) and ended.options.command is None
        assert (await engine.runs.result(ended))["done"] == [1]
        events = [event for _id, event, _data in await frames_of(engine, "old-run")]
        assert events[0] == "metadata" and "custom" in events and events[-1] == "end"
