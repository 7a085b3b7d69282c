"""One execution of a run, which every executor of runs is built from.

`Runner` holds what executing any run needs: the run storage, LangGraph's saver and
its housekeeping (from the backend), the graphs, their context and the limits (an
`ExecutorSetup`). It also answers what an executor answers for runs wherever they
execute: a thread's state as its graph sees it, what `/wait` returns, the LangGraph
config of a thread, and the end of a run that used up its attempts.

`RunExecution` is one run's execution from its queue to its end: it streams the
graph, appends every chunk to the run's event log as a frame with the next id
(`engine.protocols.EventLog`), and records the outcome with its last frames — and,
for a run with a `webhook`, its delivery in the outbox, in the same transaction
(`engine.webhooks.enqueue_delivery`). The in-process executor
(`engine.executor.InProcessExecutor`) runs one in a task per run; the scale-out
workers execute their claimed runs through that same executor.

Cancellation is `Task.cancel()`, which LangGraph honours: the running node's
awaits (an LLM request included) are cancelled at once. The cancel reason decides
what the run's record says:

    interrupt   status interrupted, the checkpoints kept (resume later)
    rollback    the checkpoints this run wrote deleted, then the run itself (as on
                the Platform; its stream still ends with `end`)
    shutdown    nothing recorded: the run stays pending/running, and the next
                start-up resumes it from its last checkpoint (`EngineCore.recover`)
    storage     the event log gave the run's writes up: it ends with `StorageError`
    lease       another worker holds the run now (its lease expired): nothing is
                written, the holder continues it (scale-out deployment)

Storage failures: when the event log gives a run's writes up, the run's task is
cancelled (reason `storage`) and the run ends with an `error` frame
(`StorageError`) and an `end` frame, written from its first lost frame id so its
ids stay gapless. When even those cannot be written, the run is left as its
record says (pending or running): the executor stops executing it, its streams are
told it stalled, and the recovery sweep starts it again once the database takes
writes.

A resumed execution (attempt + 1) continues from the thread's last checkpoint when
that checkpoint is its own, with a new `metadata` frame telling the attempt.

With tracing on (`ExecutorSetup.tracing`), each execution is a `run <assistant>` span
continuing the trace stored with the run (`engine.tracing`), its nodes', LLM calls'
and tools' spans nested in it; the `metadata` frame carries its `trace_id`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from core.run_config import OWNER_KEY
from engine.frames import SCHEMA_VERSION, FrameTranslator, graph_modes, public_error
from engine.protocols import CheckpointHousekeeping, ExecutorSetup, RunStorage, StoreError
from engine.reads import run_result, thread_values
from engine.records import (
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    RunStatusChange,
    RunUsageRecorded,
    ThreadStateChange,
    ThreadStatus,
)
from engine.serde import dumps
from engine.tracing import TracedRun
from engine.usage import UNMEASURED, UsageReading
from engine.webhooks import enqueue_delivery

log = logging.getLogger(__name__)

#: What a client learns about a run whose event log could not be written.
STORAGE_ERROR = {
    "error": "StorageError",
    "message": "the run's events could not be saved; the run was stopped",
}
#: Why a run's task is cancelled: a client's cancel action, the server stopping, its
#: event log failing, or its lease lost to another worker.
CancelReason = CancelAction | Literal["shutdown", "storage", "lease"]
#: Runs deleted as they ended whose record and result are kept for their waiters.
ENDED_KEPT = 256


def graph_config(
    thread_id: str,
    run: RunRecord | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> RunnableConfig:
    """Return the LangGraph config of a thread (and of a run on it)."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    if run is None:
        return config  # type: ignore[return-value]
    client = run.options.config
    # The run's owner last, so no client sets it: the agents' knowledge and store scope.
    config["configurable"] = {
        **client.get("configurable", {}),
        "thread_id": thread_id,
        OWNER_KEY: run.owner,
    }
    # Checkpoints copy these, which is how a rollback finds a run's checkpoints.
    config["metadata"] = {
        "run_id": run.run_id,
        "assistant_id": run.assistant_id,
        "graph_id": run.graph_id,
        "attempt": run.attempt,
    }
    if client.get("tags"):
        config["tags"] = list(client["tags"])
    if client.get("recursion_limit"):
        config["recursion_limit"] = client["recursion_limit"]
    if callbacks:
        config["callbacks"] = list(callbacks)
    return config  # type: ignore[return-value]


@dataclass
class Outcome:
    """How a run's execution went, as its record will say."""

    status: RunStatus
    error: dict[str, str] | None = None
    cancel_reason: CancelReason | None = None


class Runner:
    """What executing a run needs, and the answers about runs every executor gives."""

    def __init__(
        self,
        *,
        storage: RunStorage,
        checkpointer: BaseCheckpointSaver,
        checkpoints: CheckpointHousekeeping,
        setup: ExecutorSetup,
    ) -> None:
        """Bind the runner to a backend's parts and the graphs, context and limits."""
        self.threads = storage.threads
        self.runs = storage.runs
        self.events = storage.events
        self.checkpointer = checkpointer
        self.checkpoints = checkpoints
        self.assistants = setup.assistants
        self.context = setup.context
        self.run_timeout = setup.run_timeout
        self.metrics = setup.metrics
        self.tracing = setup.tracing
        self.public_errors = setup.public_errors
        self.meter = setup.meter
        self.callbacks = list(setup.callbacks)
        if self.tracing is not None:
            self.callbacks.append(self.tracing.callback)
        #: Record and result of runs deleted as they ended, for their /wait and /join.
        self.ended: dict[str, tuple[RunRecord, dict[str, Any]]] = {}

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it, with callbacks)."""
        return graph_config(thread_id, run, self.callbacks if run is not None else ())

    async def abandon(self, run: RunRecord, next_id: int) -> None:
        """End a run that used up its attempts: `error` (RunAbandoned) and `end` frames.

        Raises:
            StoreError: They could not be written (the next recovery tries again).
        """
        error = {
            "error": "RunAbandoned",
            "message": f"the server stopped during each of the run's {run.attempt} attempts",
        }
        end = {"run_id": run.run_id, "status": "error"}
        self.events.append(run.run_id, Frame(next_id, "error", dumps(error)))
        self.events.append(run.run_id, Frame(next_id + 1, "end", dumps(end)))
        self.events.record(RunStatusChange(run.run_id, "error", error=error), run_id=run.run_id)
        self.events.record(ThreadStateChange(run.thread_id, "error"), run_id=run.run_id)
        # Its calls were made, unmetered: its usage is unknown (never 0).
        self.events.record(
            RunUsageRecorded(run.run_id, run.owner, run.assistant_id, run.created_at, UNMEASURED),
            run_id=run.run_id,
        )
        enqueue_delivery(self.events, run, status="error", error=error)
        try:
            await self.events.flush(run.run_id)
        finally:
            self.events.reopen(run.run_id)
        log.warning("abandoned run %s after %d attempts", run.run_id, run.attempt)

    def keep_ended(self, record: RunRecord, result: dict[str, Any]) -> None:
        """Remember a run deleted as it ended, for its waiters (the latest `ENDED_KEPT`)."""
        self.ended[record.run_id] = (record, result)
        while len(self.ended) > ENDED_KEPT:
            self.ended.pop(next(iter(self.ended)))


class RunExecution:
    """One run's execution, from its queue to its end (see the module docstring).

    The executor creates the task that `drive`s it and sets `task`; `busy_beside`
    tells whether the executor executes another run of the same thread (the thread
    stays busy when this one ends).
    """

    def __init__(
        self,
        runner: Runner,
        run: RunRecord,
        next_id: int,
        *,
        busy_beside: Callable[[RunExecution], bool],
    ) -> None:
        """Prepare the execution of `run`, its first frame numbered `next_id`; nothing runs yet."""
        self.runner = runner
        self.run = run
        self.next_id = next_id
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.cancel_reason: CancelReason | None = None
        #: Past the graph: cancelling now would lose the outcome.
        self.finishing = False
        self.started = time.monotonic()
        #: Its task took its first step. A task cancelled before that never runs its body
        #: (no handler, no `finally`): the run would never end, so such a cancel waits.
        self.entered = False
        self._busy_beside = busy_beside
        #: Its execution's span, while tracing is on.
        self.traced: TracedRun | None = None
        #: What the run's meter measured (None: no meter, or not started).
        self.reading: UsageReading | None = None

    # -- cancel ----------------------------------------------------------------------

    def request_cancel(self, reason: CancelReason) -> None:
        """Cancel the run's task for `reason` (no-op once it is finishing or done)."""
        if self.finishing or self.task is None or self.task.done():
            return
        cancelled = self.cancel_reason is not None
        self.cancel_reason = reason  # the latest reason decides the outcome
        if not cancelled and self.entered:  # one cancel only: the handler uncancels once
            self.task.cancel()
        # Not entered yet (cancelled in the same step that started it, as a worker does
        # with a run whose cancel was asked while it was pending): `drive` cancels it.

    def stop(self) -> None:
        """Stop the run without recording an outcome (unless it is finishing already)."""
        if self.task is not None and not self.finishing:
            self.cancel_reason = "shutdown"
            if self.entered:  # else its first step cancels it (`drive`)
                self.task.cancel()

    # -- execution ---------------------------------------------------------------------

    async def drive(self, after: Sequence[asyncio.Future[None]]) -> bool:
        """Execute the run from queue to end, whatever happens to it on the way.

        The run ends with `error` + `end` frames and a terminal status, or — when not
        even those can be written — is left as its record says for the recovery sweep.
        With tracing on, all of it is the run's span.

        Returns:
            Whether the run's end is durable.
        """
        tracing = self.runner.tracing
        if tracing is None:
            return await self._drive(after)
        with tracing.executing(self.run) as self.traced:
            return await self._drive(after)

    async def _drive(self, after: Sequence[asyncio.Future[None]]) -> bool:
        run = self.run
        ended = False
        self.entered = True
        if self.cancel_reason is not None and self.task is not None:
            self.task.cancel()  # asked before this first step: lands at its first await
        try:
            try:
                with self._measuring():
                    outcome = await self._outcome(after)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed rollback, a bug: still end the run loudly
                log.exception("run %s failed outside its graph", run.run_id)
                outcome = Outcome("error", error=self._public(exc))
            if self.traced is not None:
                self.traced.outcome, self.traced.error = outcome.status, outcome.error
            ended = await self._end(outcome)
            if ended:
                await self._after_end(outcome)
        except asyncio.CancelledError:
            raise  # the server is stopping: leave the run for recovery
        except Exception:
            log.exception("run %s could not be completed; left for recovery", run.run_id)
        return ended

    @contextlib.contextmanager
    def _measuring(self) -> Iterator[None]:
        """Measure the LLM usage of what the block runs (the graph), when a meter is set."""
        meter = self.runner.meter
        if meter is None:
            yield
            return
        with meter.measuring() as self.reading:
            yield

    def _usage(self) -> RunUsageRecorded:
        """Return the record of the run's usage (unknown when nothing measured it)."""
        run = self.run
        usage = self.reading.usage() if self.reading is not None else UNMEASURED
        return RunUsageRecorded(run.run_id, run.owner, run.assistant_id, run.created_at, usage)

    def _emit(self, event: str, data: Any) -> None:
        frame = Frame(self.next_id, event, dumps(data))
        self.next_id += 1
        self.runner.events.append(self.run.run_id, frame)

    def _metadata(self) -> dict[str, Any]:
        run = self.run
        metadata = {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "attempt": run.attempt,
            "schema_version": SCHEMA_VERSION,
        }
        if self.traced is not None:
            metadata["trace_id"] = self.traced.trace_id
        return metadata

    async def _outcome(self, after: Sequence[asyncio.Future[None]]) -> Outcome:
        """Run the graph (after the runs queued before this one) and say how it went."""
        run = self.run
        checkpoints = self.runner.checkpoints
        try:
            if after:
                await asyncio.wait([asyncio.ensure_future(f) for f in after])
            if run.options.after_seconds and run.attempt == 0:
                await asyncio.sleep(float(run.options.after_seconds))
            return await self._execute()
        except StoreError:
            return Outcome("error", error=dict(STORAGE_ERROR))
        except asyncio.CancelledError:
            reason = self.cancel_reason
            if reason is None or reason in ("shutdown", "lease"):
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            await checkpoints.settle()
            if reason == "storage":
                return Outcome("error", error=dict(STORAGE_ERROR))
            if reason == "rollback":
                deleted = await checkpoints.delete_run(run.thread_id, run.run_id)
                log.info("rolled back run %s: %s checkpoint(s) deleted", run.run_id, deleted)
            return Outcome("interrupted", cancel_reason=reason)

    async def _end(self, outcome: Outcome) -> bool:
        """Record the outcome; if its frames cannot be written, try once as a storage error.

        Returns:
            Whether the run's end is durable (False: left for the recovery sweep).
        """
        try:
            await self._finish(outcome)
            return True
        except StoreError:
            log.error("run %s: could not record its %s outcome", self.run.run_id, outcome.status)
        try:
            await self._finish(Outcome("error", error=dict(STORAGE_ERROR)))
            return True
        except StoreError:
            log.error(
                "run %s: the database takes no writes; left %s for recovery",
                self.run.run_id,
                self.run.status,
            )
            return False

    async def _execute(self) -> Outcome:
        run = self.run
        runner = self.runner
        assistant = runner.assistants.get(run.graph_id)
        if assistant is None:
            return Outcome(
                "error",
                error={"error": "NotFound", "message": f"graph {run.graph_id!r} is gone"},
            )
        graph = assistant.graph
        payload = await self._payload()
        run.attempt += 1
        run.status = "running"
        self._emit("metadata", self._metadata())
        runner.events.record(
            RunStatusChange(run.run_id, "running", attempt=run.attempt), run_id=run.run_id
        )
        # Commit the first frame before the graph starts: its first step may hold the
        # event loop for a while (CPU work before its first await), and clients should
        # learn the run is under way at once.
        await runner.events.flush(run.run_id)
        modes = list(run.options.stream_mode) or ["values"]
        translate = FrameTranslator(
            modes,
            subgraphs=run.options.stream_subgraphs,
            keep_message=assistant.spec.keep_message,
        )
        config = runner.graph_config(run.thread_id, run)
        start = self._start_config(config, payload)
        deadline = asyncio.timeout(runner.run_timeout)
        metrics = runner.metrics
        try:
            async with deadline:
                async for item in graph.astream(
                    payload,
                    start,
                    context=runner.context,
                    stream_mode=graph_modes([*modes, "custom"]),
                    subgraphs=True,
                    **self._graph_options(),
                ):
                    namespace, mode, chunk = cast(tuple[tuple[str, ...], str, Any], item)
                    if mode == "custom" and metrics is not None and isinstance(chunk, dict):
                        metrics.observe_event(chunk)
                    for frame in translate(namespace, mode, chunk):
                        self._emit(*frame)
        except TimeoutError as exc:
            if not deadline.expired():
                log.exception("run %s failed", run.run_id)
                return Outcome("error", error=self._public(exc))
            return Outcome(
                "timeout",
                error={
                    "error": "TimeoutError",
                    "message": f"the run exceeded RUN_TIMEOUT ({runner.run_timeout:g} s)",
                },
            )
        except Exception as exc:
            log.exception("run %s failed", run.run_id)
            return Outcome("error", error=self._public(exc))
        snapshot = await graph.aget_state(config)
        # Pending interrupts, or nodes left to run after a breakpoint (interrupt_before/after).
        paused = bool(snapshot.interrupts) or bool(snapshot.next)
        return Outcome("interrupted" if paused else "success")

    def _start_config(self, config: RunnableConfig, payload: Any) -> RunnableConfig:
        """Return the config the run starts from: its start checkpoint, if it asked for one.

        LangGraph forks when that checkpoint is not the thread's head. An execution that
        resumes the run's own last checkpoint after a restart starts from the head.
        """
        checkpoint = self.run.options.checkpoint
        if not checkpoint or (payload is None and self.run.attempt > 1):
            return config
        return {**config, "configurable": {**config["configurable"], **checkpoint}}

    def _graph_options(self) -> dict[str, Any]:
        """Return the run's Platform options LangGraph's `astream` takes itself."""
        options = self.run.options
        given = {
            "interrupt_before": options.interrupt_before,
            "interrupt_after": options.interrupt_after,
            "durability": options.durability,
        }
        return {name: value for name, value in given.items() if value is not None}

    def _public(self, exc: BaseException) -> dict[str, str]:
        """Return the `error` frame of an exception (`engine.frames.public_error`)."""
        return public_error(exc, self.runner.public_errors)

    async def _payload(self) -> Any:
        """Return what the graph is invoked with: input, a Command, or None to continue."""
        run = self.run
        if run.attempt > 0:
            # A resumed execution: continue from the run's own last checkpoint, if any.
            head = self.runner.graph_config(run.thread_id)
            latest = await self.runner.checkpointer.aget_tuple(head)
            if latest is not None and latest.metadata.get("run_id") == run.run_id:
                return None
        command = run.options.command
        if command:
            return Command(
                resume=command.get("resume"),
                update=command.get("update"),
                goto=command.get("goto") or (),
            )
        return run.options.input

    async def _finish(self, outcome: Outcome) -> None:
        """Write the run's last frames (`error`, `end`) and its terminal status, durably.

        Raises:
            StoreError: They could not be written.
        """
        self.finishing = True
        run = self.run
        runner = self.runner
        events = runner.events
        if events.is_lost(run.run_id):
            # Continue the log from the first frame that did not make it: no gap.
            first = events.reopen(run.run_id)
            if first is not None:
                self.next_id = first
        if await runner.checkpoints.settle():
            log.info("run %s: committed a checkpoint write its cancellation left open", run.run_id)
        if self.next_id == 1:  # cancelled before it started: the stream still opens with this
            self._emit("metadata", self._metadata())
        values, interrupts = await thread_values(runner.assistants.get(run.graph_id), run.thread_id)
        if self._busy_beside(self):
            thread_status: ThreadStatus = "busy"
        elif outcome.status in ("error", "timeout"):
            thread_status = "error"
        elif interrupts or (outcome.status == "interrupted" and outcome.cancel_reason is None):
            thread_status = "interrupted"  # an interrupt() or a breakpoint (interrupt_before/after)
        else:
            thread_status = "idle"
        if outcome.error is not None:
            self._emit("error", outcome.error)
        self._emit("end", {"run_id": run.run_id, "status": outcome.status})
        events.record(
            RunStatusChange(
                run.run_id,
                outcome.status,
                attempt=run.attempt,
                cancel_reason=outcome.cancel_reason,
                error=outcome.error,
            ),
            run_id=run.run_id,
        )
        events.record(
            ThreadStateChange(run.thread_id, thread_status, values, interrupts), run_id=run.run_id
        )
        events.record(self._usage(), run_id=run.run_id)
        enqueue_delivery(events, run, status=outcome.status, result=values, error=outcome.error)
        await events.flush(run.run_id)
        if runner.metrics is not None:
            runner.metrics.run_finished(outcome.status, time.monotonic() - self.started)

    async def _after_end(self, outcome: Outcome) -> None:
        """Drop what the Platform drops once a run ended.

        A `rollback` cancel deletes the run (its checkpoints are already gone); a
        thread-less run with `on_completion: delete` deletes its thread. What
        `/wait` and `/join` answer is kept in memory for their waiters first.
        """
        run = self.run
        runner = self.runner
        rolled_back = outcome.cancel_reason == "rollback"
        delete_thread = run.options.on_completion == "delete"
        if not (rolled_back or delete_thread):
            return
        record = await runner.runs.get(run.run_id)
        if record is not None:
            runner.keep_ended(record, await run_result(record, runner.threads.get))
        if delete_thread:
            await runner.threads.delete(run.thread_id)
            await runner.checkpoints.delete_thread(run.thread_id)
            log.info(
                "deleted thread %s of run %s (on_completion delete)", run.thread_id, run.run_id
            )
        else:
            await runner.runs.delete(run.run_id)
