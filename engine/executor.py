"""The in-process executor: runs execute in asyncio tasks it owns, never in an HTTP request.

`start` creates a task that drives the run's `engine.execution.RunExecution`: the
graph streamed, every chunk appended to the run's event log as a frame, the outcome
recorded. SSE responses only follow the log (`app.sse`). So a client that
disconnects leaves no zombie node behind, and the same run can be followed by any
number of clients. The embedded deployment's engine executes its runs with
it; a scale-out worker (`engine.postgres.worker`) executes the runs it claims with
one of its own.

Cancelling a run cancels its task with a reason (`engine.execution` says what each
records); `shutdown` stops every run without recording an outcome, for the next
start-up (or another worker) to resume.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from engine.execution import CancelReason, RunExecution, Runner
from engine.protocols import LiveFrames
from engine.records import CancelAction, RunRecord

log = logging.getLogger(__name__)


class InProcessExecutor:
    """Execute runs in this process's event loop, one asyncio task per run.

    It implements `engine.protocols.RunExecutor`, as `engine.postgres.queue.QueueExecutor`
    does for runs executed by the workers of a shared queue.
    """

    def __init__(self, runner: Runner, live: LiveFrames) -> None:
        """Execute runs with `runner`, telling `live` which runs execute here.

        The executor takes over the event log's `on_lost`: a run whose writes are
        given up is stopped, to end with a storage error.
        """
        self.runner = runner
        self.hub = live
        self.events = runner.events
        self._active: dict[str, RunExecution] = {}
        runner.events.on_lost = self._on_lost

    # -- what is executing -----------------------------------------------------------

    def is_active(self, run_id: str) -> bool:
        """Whether this process is executing the run (or has it queued)."""
        return run_id in self._active

    def is_finishing(self, run_id: str) -> bool:
        """Whether the run is past its graph, writing its outcome (or done with it)."""
        execution = self._active.get(run_id)
        return execution is None or execution.finishing

    def active_on(self, thread_id: str) -> list[str]:
        """Return the ids of the runs of a thread this process is executing."""
        return [e.run.run_id for e in self._active.values() if e.run.thread_id == thread_id]

    async def wait(self, run_id: str) -> None:
        """Wait until this process stops executing the run (at once if it does not)."""
        execution = self._active.get(run_id)
        if execution is not None:
            await asyncio.shield(execution.done)

    def ended(self, run_id: str) -> tuple[RunRecord, dict[str, Any]] | None:
        """Return the record and result of a run deleted as it ended, if still known."""
        return self.runner.ended.get(run_id)

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it, with callbacks)."""
        return self.runner.graph_config(thread_id, run)

    async def abandon(self, run: RunRecord, next_id: int) -> None:
        """End a run that used up its attempts (`Runner.abandon`)."""
        await self.runner.abandon(run, next_id)

    # -- cancel ----------------------------------------------------------------------

    def cancel(self, run_id: str, reason: CancelReason) -> None:
        """Cancel a run this process executes (no-op when it does not, or is finishing)."""
        execution = self._active.get(run_id)
        if execution is not None:
            execution.request_cancel(reason)

    async def cancel_all(self, run_ids: Sequence[str], action: CancelAction) -> None:
        """Cancel runs and wait until each has stopped."""
        waits = []
        for run_id in run_ids:
            execution = self._active.get(run_id)
            if execution is not None:
                execution.request_cancel(action)
                waits.append(execution.done)
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits])

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        tasks = []
        for execution in list(self._active.values()):
            execution.stop()
            if execution.task is not None:
                tasks.append(execution.task)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await self.runner.checkpoints.settle()
        await self.events.flush()

    # -- execution -------------------------------------------------------------------

    def start(self, run: RunRecord, *, after: Sequence[str] = (), next_id: int = 1) -> None:
        """Start executing a run in a task, after the runs `after` (ids) this process executes.

        Args:
            run: The run (pending, or left running by a stopped execution).
            after: Runs of its thread to wait for first (enqueue, recovery order).
            next_id: The id its first frame gets (1, or after its last durable frame).
        """
        previous = [self._active[r].done for r in after if r in self._active]
        run = dataclasses.replace(run)  # the task's own copy: it updates status and attempt
        execution = RunExecution(self.runner, run, next_id, busy_beside=self._busy_beside)
        self._active[run.run_id] = execution
        self.hub.run_live(run.run_id)
        metrics = self.runner.metrics
        if metrics is not None:
            metrics.run_started()
        execution.task = asyncio.create_task(
            self._drive(execution, previous), name=f"run-{run.run_id}"
        )

    async def _drive(self, execution: RunExecution, after: Sequence[asyncio.Future[None]]) -> None:
        """Drive a run's execution; whatever happens, this process stops executing it."""
        ended = False
        try:
            ended = await execution.drive(after)
        finally:
            run_id = execution.run.run_id
            self._active.pop(run_id, None)
            self.hub.run_gone(run_id)
            metrics = self.runner.metrics
            if not ended and metrics is not None:
                metrics.run_left()
            if not execution.done.done():
                execution.done.set_result(None)

    def _busy_beside(self, execution: RunExecution) -> bool:
        """Whether this process executes another run of the execution's thread."""
        thread_id = execution.run.thread_id
        return any(
            e.run.thread_id == thread_id and e is not execution for e in self._active.values()
        )

    def _on_lost(self, run_id: str) -> None:
        """The event log gave a run's writes up: stop the run so it can end loudly."""
        execution = self._active.get(run_id)
        if execution is not None:
            log.error("run %s: its event log could not be written; stopping it", run_id)
            execution.request_cancel("storage")
