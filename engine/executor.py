"""The executor: runs execute in asyncio tasks it owns, never in an HTTP request.

`start` creates a task that streams the graph and appends every chunk to the run's
event log as a frame with the next id (`engine.protocols.EventLog`); SSE
responses only follow the log (`app.sse`). So a client that disconnects leaves no
zombie node behind, and the same run can be followed by any number of clients.

Cancellation is `Task.cancel()`, which LangGraph honours: the running node's
awaits (an LLM request included) are cancelled at once. The cancel reason decides
what the run's record says:

    interrupt   status interrupted, the checkpoints kept (resume later)
    rollback    the checkpoints this run wrote deleted, then the run itself (as on
                the Platform; its stream still ends with `end`)
    shutdown    nothing recorded: the run stays pending/running, and the next
                start-up resumes it from its last checkpoint (`RunManager.recover`)
    storage     the event log gave the run's writes up: it ends with `StorageError`
    lease       another worker holds the run now (its lease expired): nothing is
                written, the holder continues it (scale-out deployment)

Storage failures: when the event log gives a run's writes up, the run's task is
cancelled (reason `storage`) and the run ends with an `error` frame
(`StorageError`) and an `end` frame, written from its first lost frame id so its
ids stay gapless. When even those cannot be written, the run is left as its
record says (pending or running): this process stops executing it, its streams are
told it stalled, and the recovery sweep starts it again once the database takes
writes.

A resumed execution (attempt + 1) continues from the thread's last checkpoint when
that checkpoint is its own, with a new `metadata` frame telling the attempt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from engine.assistants import Assistant
from engine.checkpoints import delete_run_checkpoints, delete_thread_checkpoints, settle
from engine.frames import SCHEMA_VERSION, FrameTranslator, graph_modes, public_error
from engine.protocols import LiveFrames, RunStorage, StoreError
from engine.reads import run_result, thread_values
from engine.records import (
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    RunStatusChange,
    ThreadStateChange,
    ThreadStatus,
)
from engine.serde import dumps
from studio.context import AtelierContext

log = logging.getLogger(__name__)

#: What a client learns about a run whose event log could not be written.
STORAGE_ERROR = {
    "error": "StorageError",
    "message": "the run's events could not be saved; the run was stopped",
}
#: Why a run's task is cancelled: a client's cancel action, the server stopping, its
#: event log failing, or its lease lost to another worker.
CancelReason = CancelAction | Literal["shutdown", "storage", "lease"]


class RunMetrics(Protocol):
    """What the executor reports (implemented by `app.metrics.AtelierMetrics`)."""

    def run_started(self) -> None: ...
    def run_finished(self, status: str, seconds: float) -> None: ...
    def run_left(self) -> None: ...
    def observe_event(self, event: Any) -> None: ...


@dataclass(eq=False)
class _Active:
    """A run this process is executing (or about to)."""

    run: RunRecord
    next_id: int
    done: asyncio.Future[None]
    task: asyncio.Task[None] | None = None
    cancel_reason: CancelReason | None = None
    finishing: bool = False  # past the graph: cancelling now would lose the outcome
    started: float = field(default_factory=time.monotonic)
    # Its task took its first step. A task cancelled before that never runs its body
    # (no handler, no `finally`): the run would never end, so such a cancel waits.
    entered: bool = False


@dataclass
class _Outcome:
    status: RunStatus
    error: dict[str, str] | None = None
    cancel_reason: CancelReason | None = None


def graph_config(
    thread_id: str,
    run: RunRecord | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> RunnableConfig:
    """Return the LangGraph config of a thread (and of a run on it)."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    if run is None:
        return config  # type: ignore[return-value]
    client = run.kwargs.get("config") or {}
    config["configurable"] = {**client.get("configurable", {}), "thread_id": thread_id}
    # Checkpoints copy these, which is how a rollback finds a run's checkpoints.
    config["metadata"] = {
        "run_id": run.run_id,
        "assistant_id": run.assistant_id,
        "graph_id": run.assistant_id,
        "attempt": run.attempt,
    }
    if client.get("tags"):
        config["tags"] = list(client["tags"])
    if client.get("recursion_limit"):
        config["recursion_limit"] = client["recursion_limit"]
    if callbacks:
        config["callbacks"] = list(callbacks)
    return config  # type: ignore[return-value]


class InProcessExecutor:
    """Execute runs in this process's event loop, one asyncio task per run.

    It implements `engine.protocols.RunExecutor`; a worker process that claims
    runs from a shared database is another implementation of the same protocol.
    """

    def __init__(
        self,
        *,
        storage: RunStorage,
        hub: LiveFrames,
        assistants: dict[str, Assistant],
        context: AtelierContext,
        checkpointer: BaseCheckpointSaver,
        run_timeout: float,
        metrics: RunMetrics | None = None,
        callbacks: Sequence[BaseCallbackHandler] = (),
    ) -> None:
        """Bind the executor to its storage, fan-out, graphs and limits."""
        self.threads = storage.threads
        self.runs = storage.runs
        self.events = storage.events
        self.hub = hub
        self.assistants = assistants
        self.context = context
        self.checkpointer = checkpointer
        self.run_timeout = run_timeout
        self.metrics = metrics
        self.callbacks = list(callbacks)
        self._active: dict[str, _Active] = {}
        #: Record and result of runs deleted as they ended, for their /wait and /join.
        self._ended: dict[str, tuple[RunRecord, dict[str, Any]]] = {}
        storage.events.on_lost = self._on_lost

    # -- what is executing -----------------------------------------------------------

    def is_active(self, run_id: str) -> bool:
        """Whether this process is executing the run (or has it queued)."""
        return run_id in self._active

    def is_finishing(self, run_id: str) -> bool:
        """Whether the run is past its graph, writing its outcome (or done with it)."""
        active = self._active.get(run_id)
        return active is None or active.finishing

    def active_on(self, thread_id: str) -> list[str]:
        """Return the ids of the runs of a thread this process is executing."""
        return [a.run.run_id for a in self._active.values() if a.run.thread_id == thread_id]

    async def wait(self, run_id: str) -> None:
        """Wait until this process stops executing the run (at once if it does not)."""
        active = self._active.get(run_id)
        if active is not None:
            await asyncio.shield(active.done)

    def ended(self, run_id: str) -> tuple[RunRecord, dict[str, Any]] | None:
        """Return the record and result of a run deleted as it ended, if still known."""
        return self._ended.get(run_id)

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it, with callbacks)."""
        return graph_config(thread_id, run, self.callbacks if run is not None else ())

    # -- cancel ----------------------------------------------------------------------

    def cancel(self, run_id: str, reason: CancelReason) -> None:
        """Cancel a run this process executes (no-op when it does not, or is finishing)."""
        active = self._active.get(run_id)
        if active is not None:
            self._request_cancel(active, reason)

    def _request_cancel(self, active: _Active, reason: CancelReason) -> None:
        if active.finishing or active.task is None or active.task.done():
            return
        cancelled = active.cancel_reason is not None
        active.cancel_reason = reason  # the latest reason decides the outcome
        if not cancelled and active.entered:  # one cancel only: the handler uncancels once
            active.task.cancel()
        # Not entered yet (cancelled in the same step that started it, as a worker does
        # with a run whose cancel was asked while it was pending): `_drive` cancels it.

    async def cancel_all(self, run_ids: Sequence[str], action: CancelAction) -> None:
        """Cancel runs and wait until each has stopped."""
        waits = []
        for run_id in run_ids:
            active = self._active.get(run_id)
            if active is not None:
                self._request_cancel(active, action)
                waits.append(active.done)
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits])

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        tasks = []
        for active in list(self._active.values()):
            if active.task is not None and not active.finishing:
                active.cancel_reason = "shutdown"
                if active.entered:  # else its first step cancels it (`_drive`)
                    active.task.cancel()
            if active.task is not None:
                tasks.append(active.task)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await settle(self.checkpointer)
        await self.events.flush()

    # -- execution -------------------------------------------------------------------

    def start(self, run: RunRecord, *, after: Sequence[str] = (), next_id: int = 1) -> None:
        """Start executing a run in a task, after the runs `after` (ids) this process executes.

        Args:
            run: The run (pending, or left running by a stopped execution).
            after: Runs of its thread to wait for first (enqueue, recovery order).
            next_id: The id its first frame gets (1, or after its last durable frame).
        """
        loop = asyncio.get_running_loop()
        previous = [self._active[r].done for r in after if r in self._active]
        run = dataclasses.replace(run)  # the task's own copy: it updates status and attempt
        active = _Active(run=run, next_id=next_id, done=loop.create_future())
        self._active[run.run_id] = active
        self.hub.run_live(run.run_id)
        if self.metrics is not None:
            self.metrics.run_started()
        active.task = asyncio.create_task(self._drive(active, previous), name=f"run-{run.run_id}")

    @staticmethod
    def _metadata(run: RunRecord) -> dict[str, Any]:
        return {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "attempt": run.attempt,
            "schema_version": SCHEMA_VERSION,
        }

    def _emit(self, active: _Active, event: str, data: Any) -> None:
        frame = Frame(active.next_id, event, dumps(data))
        active.next_id += 1
        self.events.append(active.run.run_id, frame)

    def _on_lost(self, run_id: str) -> None:
        """The event log gave a run's writes up: stop the run so it can end loudly."""
        active = self._active.get(run_id)
        if active is not None:
            log.error("run %s: its event log could not be written; stopping it", run_id)
            self._request_cancel(active, "storage")

    async def _drive(self, active: _Active, after: Sequence[asyncio.Future[None]]) -> None:
        """Execute a run from queue to end, whatever happens to it on the way.

        The run ends with `error` + `end` frames and a terminal status, or — when not
        even those can be written — is left as its record says for the recovery sweep.
        """
        run = active.run
        ended = False
        active.entered = True
        if active.cancel_reason is not None and active.task is not None:
            active.task.cancel()  # asked before this first step: lands at its first await
        try:
            try:
                outcome = await self._outcome(active, after)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed rollback, a bug: still end the run loudly
                log.exception("run %s failed outside its graph", run.run_id)
                outcome = _Outcome("error", error=public_error(exc))
            ended = await self._end(active, outcome)
            if ended:
                await self._after_end(run, outcome)
        except asyncio.CancelledError:
            raise  # the server is stopping: leave the run for recovery
        except Exception:
            log.exception("run %s could not be completed; left for recovery", run.run_id)
        finally:
            self._active.pop(run.run_id, None)
            self.hub.run_gone(run.run_id)
            if not ended and self.metrics is not None:
                self.metrics.run_left()
            if not active.done.done():
                active.done.set_result(None)

    async def _outcome(self, active: _Active, after: Sequence[asyncio.Future[None]]) -> _Outcome:
        """Run the graph (after the runs queued before this one) and say how it went."""
        run = active.run
        try:
            if after:
                await asyncio.wait([asyncio.ensure_future(f) for f in after])
            if run.kwargs.get("after_seconds") and run.attempt == 0:
                await asyncio.sleep(float(run.kwargs["after_seconds"]))
            return await self._execute(active)
        except StoreError:
            return _Outcome("error", error=dict(STORAGE_ERROR))
        except asyncio.CancelledError:
            reason = active.cancel_reason
            if reason is None or reason in ("shutdown", "lease"):
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            await settle(self.checkpointer)
            if reason == "storage":
                return _Outcome("error", error=dict(STORAGE_ERROR))
            if reason == "rollback":
                deleted = await delete_run_checkpoints(self.checkpointer, run.thread_id, run.run_id)
                log.info("rolled back run %s: %s checkpoint(s) deleted", run.run_id, deleted)
            return _Outcome("interrupted", cancel_reason=reason)

    async def _end(self, active: _Active, outcome: _Outcome) -> bool:
        """Record the outcome; if its frames cannot be written, try once as a storage error.

        Returns:
            Whether the run's end is durable (False: left for the recovery sweep).
        """
        try:
            await self._finish(active, outcome)
            return True
        except StoreError:
            log.error("run %s: could not record its %s outcome", active.run.run_id, outcome.status)
        try:
            await self._finish(active, _Outcome("error", error=dict(STORAGE_ERROR)))
            return True
        except StoreError:
            log.error(
                "run %s: the database takes no writes; left %s for recovery",
                active.run.run_id,
                active.run.status,
            )
            return False

    async def _execute(self, active: _Active) -> _Outcome:
        run = active.run
        assistant = self.assistants.get(run.assistant_id)
        if assistant is None:
            return _Outcome(
                "error",
                error={"error": "NotFound", "message": f"assistant {run.assistant_id!r} is gone"},
            )
        graph = assistant.graph
        payload = await self._payload(run)
        run.attempt += 1
        run.status = "running"
        self._emit(active, "metadata", self._metadata(run))
        self.events.record(
            RunStatusChange(run.run_id, "running", attempt=run.attempt), run_id=run.run_id
        )
        # Commit the first frame before the graph starts: its first step may hold the
        # event loop for a while (CPU work before its first await), and clients should
        # learn the run is under way at once.
        await self.events.flush(run.run_id)
        modes = run.kwargs.get("stream_mode") or ["values"]
        translate = FrameTranslator(
            modes,
            subgraphs=bool(run.kwargs.get("stream_subgraphs")),
            keep_message=assistant.spec.keep_message,
        )
        config = self.graph_config(run.thread_id, run)
        start = self._start_config(run, config, payload)
        deadline = asyncio.timeout(self.run_timeout)
        try:
            async with deadline:
                async for item in graph.astream(
                    payload,
                    start,
                    context=self.context,
                    stream_mode=graph_modes([*modes, "custom"]),
                    subgraphs=True,
                    **self._graph_options(run),
                ):
                    namespace, mode, chunk = cast(tuple[tuple[str, ...], str, Any], item)
                    if mode == "custom" and self.metrics is not None and isinstance(chunk, dict):
                        self.metrics.observe_event(chunk)
                    for frame in translate(namespace, mode, chunk):
                        self._emit(active, *frame)
        except TimeoutError as exc:
            if not deadline.expired():
                log.exception("run %s failed", run.run_id)
                return _Outcome("error", error=public_error(exc))
            return _Outcome(
                "timeout",
                error={
                    "error": "TimeoutError",
                    "message": f"the run exceeded RUN_TIMEOUT ({self.run_timeout:g} s)",
                },
            )
        except Exception as exc:
            log.exception("run %s failed", run.run_id)
            return _Outcome("error", error=public_error(exc))
        snapshot = await graph.aget_state(config)
        # Pending interrupts, or nodes left to run after a breakpoint (interrupt_before/after).
        paused = bool(snapshot.interrupts) or bool(snapshot.next)
        return _Outcome("interrupted" if paused else "success")

    @staticmethod
    def _start_config(run: RunRecord, config: RunnableConfig, payload: Any) -> RunnableConfig:
        """Return the config the run starts from: its start checkpoint, if it asked for one.

        LangGraph forks when that checkpoint is not the thread's head. An execution that
        resumes the run's own last checkpoint after a restart starts from the head.
        """
        checkpoint = run.kwargs.get("checkpoint")
        if not checkpoint or (payload is None and run.attempt > 1):
            return config
        return {**config, "configurable": {**config["configurable"], **checkpoint}}

    @staticmethod
    def _graph_options(run: RunRecord) -> dict[str, Any]:
        """Return the run's Platform options LangGraph's `astream` takes itself."""
        keys = ("interrupt_before", "interrupt_after", "durability")
        return {key: run.kwargs[key] for key in keys if run.kwargs.get(key) is not None}

    async def _payload(self, run: RunRecord) -> Any:
        """Return what the graph is invoked with: input, a Command, or None to continue."""
        if run.attempt > 0:
            # A resumed execution: continue from the run's own last checkpoint, if any.
            latest = await self.checkpointer.aget_tuple(self.graph_config(run.thread_id))
            if latest is not None and latest.metadata.get("run_id") == run.run_id:
                return None
        command = run.kwargs.get("command")
        if command:
            return Command(
                resume=command.get("resume"),
                update=command.get("update"),
                goto=command.get("goto") or (),
            )
        return run.kwargs.get("input")

    async def _finish(self, active: _Active, outcome: _Outcome) -> None:
        """Write the run's last frames (`error`, `end`) and its terminal status, durably.

        Raises:
            StoreError: They could not be written.
        """
        active.finishing = True
        run = active.run
        if self.events.is_lost(run.run_id):
            # Continue the log from the first frame that did not make it: no gap.
            first = self.events.reopen(run.run_id)
            if first is not None:
                active.next_id = first
        if await settle(self.checkpointer):
            log.info("run %s: committed a checkpoint write its cancellation left open", run.run_id)
        if active.next_id == 1:  # cancelled before it started: the stream still opens with this
            self._emit(active, "metadata", self._metadata(run))
        assistant = self.assistants.get(run.assistant_id)
        values, interrupts = await thread_values(assistant, run.thread_id)
        others = any(
            a.run.thread_id == run.thread_id and a is not active for a in self._active.values()
        )
        if others:
            thread_status: ThreadStatus = "busy"
        elif outcome.status in ("error", "timeout"):
            thread_status = "error"
        elif interrupts or (outcome.status == "interrupted" and outcome.cancel_reason is None):
            thread_status = "interrupted"  # an interrupt() or a breakpoint (interrupt_before/after)
        else:
            thread_status = "idle"
        if outcome.error is not None:
            self._emit(active, "error", outcome.error)
        self._emit(active, "end", {"run_id": run.run_id, "status": outcome.status})
        self.events.record(
            RunStatusChange(
                run.run_id,
                outcome.status,
                attempt=run.attempt,
                cancel_reason=outcome.cancel_reason,
                error=outcome.error,
            ),
            run_id=run.run_id,
        )
        self.events.record(
            ThreadStateChange(run.thread_id, thread_status, values, interrupts), run_id=run.run_id
        )
        await self.events.flush(run.run_id)
        if self.metrics is not None:
            self.metrics.run_finished(outcome.status, time.monotonic() - active.started)

    async def _after_end(self, run: RunRecord, outcome: _Outcome) -> None:
        """Drop what the Platform drops once a run ended.

        A `rollback` cancel deletes the run (its checkpoints are already gone); a
        thread-less run with `on_completion: delete` deletes its thread. What
        `/wait` and `/join` answer is kept in memory for their waiters first.
        """
        rolled_back = outcome.cancel_reason == "rollback"
        delete_thread = run.kwargs.get("on_completion") == "delete"
        if not (rolled_back or delete_thread):
            return
        record = await self.runs.get(run.run_id)
        if record is not None:
            self._ended[run.run_id] = (record, await run_result(record, self.threads.get))
            while len(self._ended) > 256:
                self._ended.pop(next(iter(self._ended)))
        if delete_thread:
            await self.threads.delete(run.thread_id)
            await delete_thread_checkpoints(self.checkpointer, run.thread_id)
            log.info(
                "deleted thread %s of run %s (on_completion delete)", run.thread_id, run.run_id
            )
        else:
            await self.runs.delete(run.run_id)

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
        try:
            await self.events.flush(run.run_id)
        finally:
            self.events.reopen(run.run_id)
        log.warning("abandoned run %s after %d attempts", run.run_id, run.attempt)
