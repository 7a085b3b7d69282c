"""The run manager: the run engine's front door, composed of its parts.

    preparation  RunPreparer          checks a request, applies the multitask strategy
    executor     RunExecutor          the backend's: executes runs, or has them executed
    storage      RunStorage           threads, runs and event logs (the backend's)

`create` prepares a run under one lock (the busy check and the strategy must not
interleave with another creation), records it and hands it to the executor;
`cancel`, `wait`, `result`, `update_state`, `copy_thread` and `delete_thread` are
the other things routes ask of runs and threads. Routes reach storage only through
the repository protocols the manager exposes (`threads`, `runs`, `events`).

Restart recovery: runs a previous process left pending or running are started
again under the same run id, a running one from its thread's last checkpoint
(when that checkpoint is its own) with `attempt` + 1, at most RUN_MAX_ATTEMPTS
executions in all. Their event logs continue after the last durable id, with a
new `metadata` frame telling the attempt. The same recovery runs every
RECOVERY_INTERVAL seconds while the server is up, for runs this process stopped
executing without an outcome (their storage failed).

The manager gets its storage and its executor from a `RunBackend`. Embedded
(`engine.sqlite.backend`), one process owns a DATA_DIR: the busy check is one SQL
statement and so atomic across processes, but runs execute in the process that
accepted them (`engine.executor.InProcessExecutor`). With DATABASE_URL
(`engine.postgres.backend`) the executor is `engine.postgres.queue.QueueExecutor`:
runs are recorded in the shared queue and executed by workers in any process, which
also recover them (no recovery sweep here).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from langchain_core.runnables import RunnableConfig

from engine.assistants import Assistant
from engine.checkpoints import copy_thread_checkpoints, delete_thread_checkpoints
from engine.errors import Conflict, Invalid, NotFound, Unavailable
from engine.frames import public_error
from engine.preparation import RunPreparer, RunRequest
from engine.protocols import (
    ExecutorSetup,
    RunBackend,
    RunExecutor,
    StorageUnavailable,
    StoreError,
)
from engine.records import (
    CancelAction,
    RunRecord,
    ThreadRecord,
    ThreadStateChange,
    ThreadStatus,
    now,
    out_of_attempts,
)

log = logging.getLogger(__name__)

#: Seconds between sweeps for runs this process left without an outcome.
RECOVERY_INTERVAL = 5.0


class RunManager:
    """Create, execute, cancel, join and recover runs.

    Use as an async context manager: entering recovers runs a previous process left
    behind and prunes old event logs; leaving cancels the runs in flight without
    recording an outcome, so the next start resumes them.
    """

    def __init__(
        self,
        *,
        backend: RunBackend,
        setup: ExecutorSetup,
        max_attempts: int,
        event_retention_hours: float = 0,
        recovery_interval: float = RECOVERY_INTERVAL,
    ) -> None:
        """Bind the manager to a backend, and take the executor it gives for `setup`.

        Args:
            backend: Storage, live frames and checkpoints, and the executor runs get.
            setup: The graphs served, their context and the limits runs execute with.
            max_attempts: RUN_MAX_ATTEMPTS.
            event_retention_hours: EVENT_RETENTION_HOURS (0: event logs are kept).
            recovery_interval: Seconds between recovery sweeps, where the backend
                leaves recovery to this process (0: none).
        """
        self.storage = backend.storage
        self.threads = backend.storage.threads
        self.runs = backend.storage.runs
        self.events = backend.storage.events
        self.hub = backend.live
        self.assistants = setup.assistants
        self.checkpointer = backend.checkpointer
        self.max_attempts = max_attempts
        self.event_retention_hours = event_retention_hours
        self.recovery_interval = recovery_interval if backend.recovers_runs else 0
        self.executor: RunExecutor = backend.executor(setup)
        self.preparation = RunPreparer(
            storage=self.storage, executor=self.executor, checkpointer=self.checkpointer
        )
        self._lock = asyncio.Lock()  # serialises run creation (busy checks, strategies)
        self._closing = False
        self._sweeper: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.prune_events()
        await self.recover()
        if self.recovery_interval > 0:
            self._sweeper = asyncio.create_task(self._sweep(), name="run-recovery-sweep")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.executor.shutdown()

    # -- queries -------------------------------------------------------------------

    def assistant(self, assistant_id: str) -> Assistant:
        """Return an assistant, or raise NotFound naming the known ones."""
        try:
            return self.assistants[assistant_id]
        except KeyError:
            known = ", ".join(sorted(self.assistants)) or "none"
            raise NotFound(
                f"assistant {assistant_id!r} not found; this server has: {known}",
                field="assistant_id",
            ) from None

    def is_active(self, run_id: str) -> bool:
        """Whether this process is executing the run."""
        return self.executor.is_active(run_id)

    async def wait(self, run_id: str) -> RunRecord | None:
        """Wait until the run is no longer pending or running; return its record."""
        await self.executor.wait(run_id)
        stored = await self.runs.get(run_id)
        ended = self.executor.ended(run_id)
        if stored is None and ended is not None:
            return ended[0]  # deleted as it ended (rollback, on_completion)
        return stored

    async def result(self, run: RunRecord) -> dict[str, Any]:
        """Return what `/wait` and `/join` answer: the thread's values after the run.

        A failed run answers `{"__error__": {"error", "message"}}`; an interrupted
        one carries its pending interrupts under `__interrupt__`.
        """
        return await self.executor.result(run)

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it)."""
        return self.executor.graph_config(thread_id, run)

    # -- create --------------------------------------------------------------------

    async def create(self, request: RunRequest) -> tuple[RunRecord, bool]:
        """Record a run and start executing it.

        Returns:
            The run, and whether it was created now (False: an idempotent repeat).

        Raises:
            RunsError: NotFound, Conflict (busy thread, nothing to resume), Invalid,
                or Unavailable (the database took no write).
        """
        if self._closing:
            raise Conflict("the server is shutting down")
        async with self._lock:
            prepared = await self.preparation.prepare(request)
            run = prepared.run
            if not prepared.new:
                return run, False
            try:
                stored = await self.runs.insert(
                    run, new_thread=prepared.new_thread, exclusive=not prepared.after
                )
            except StorageUnavailable:  # nothing was written: the client may retry
                raise Unavailable(
                    "the database cannot record runs right now (nothing was written); retry later"
                ) from None
            if not stored:  # another process took the thread in between
                busy = await self.runs.active(run.thread_id)
                other = busy[0].run_id if busy else "?"
                raise Conflict(f"thread {run.thread_id!r} is busy with run {other!r}")
            self.executor.start(run, after=prepared.after, next_id=1)
            return run, True

    # -- cancel --------------------------------------------------------------------

    async def cancel(self, run: RunRecord, action: CancelAction, *, wait: bool) -> RunRecord:
        """Cancel a pending or running run (`action` interrupt or rollback)."""
        if not self.executor.is_active(run.run_id) or not run.active:
            raise Conflict(f"run {run.run_id!r} is not pending or running (status {run.status})")
        self.executor.cancel(run.run_id, action)
        if wait:
            await self.executor.wait(run.run_id)
        ended = self.executor.ended(run.run_id)
        return await self.runs.get(run.run_id) or (ended[0] if ended else run)

    def cancel_soon(self, run_id: str, action: CancelAction = "interrupt") -> None:
        """Cancel a run if it is still executing (a disconnected `on_disconnect=cancel`)."""
        self.executor.cancel(run_id, action)

    async def delete_thread(self, owner: str, thread_id: str) -> None:
        """Cancel a thread's runs, then delete it with its runs, logs and checkpoints."""
        thread = await self.threads.get(owner, thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        busy = await self.runs.active(thread_id)
        await self.executor.cancel_all([r.run_id for r in busy], "interrupt")
        await self.events.flush()
        await self.threads.delete(thread_id)
        await delete_thread_checkpoints(self.checkpointer, thread_id)

    # -- thread state --------------------------------------------------------------

    async def update_state(
        self,
        thread: ThreadRecord,
        assistant: Assistant,
        values: Any,
        *,
        as_node: str | None,
        checkpoint: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Write a state update through the graph's own `aupdate_state`; return the new checkpoint.

        Refused while the thread has an active run (its next checkpoint would race the
        update). The thread record's values and status follow the new head.

        Raises:
            RunsError: Conflict (busy thread), NotFound (checkpoint) or Invalid (update).
        """
        graph = assistant.graph
        self.preparation.check_state_update(assistant, values, as_node)
        async with self._lock:
            busy = await self.runs.active(thread.thread_id)
            if busy:
                raise Conflict(
                    f"thread {thread.thread_id!r} is busy with run {busy[0].run_id!r}; "
                    "update its state once the run ended"
                )
            if checkpoint:
                await self.preparation.check_checkpoint(thread.thread_id, checkpoint)
            if assistant.check_update is not None and isinstance(values, dict):
                await self.preparation.check_update(
                    assistant, thread.thread_id, values, checkpoint, field="values", goto=[]
                )
            config = self.preparation.at_checkpoint(thread.thread_id, checkpoint)
            try:
                written = await graph.aupdate_state(config, values, as_node=as_node)
            except (ValueError, KeyError, TypeError) as exc:
                raise Invalid(f"values: {public_error(exc)['message']}", field="values") from None
            values_now, interrupts = await self.executor.thread_state(
                assistant.assistant_id, thread.thread_id
            )
            status: ThreadStatus = "interrupted" if interrupts else "idle"
            self.events.record(ThreadStateChange(thread.thread_id, status, values_now, interrupts))
            await self.events.flush()
        configurable = dict(written.get("configurable") or {})
        return {
            "thread_id": thread.thread_id,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint_map": configurable.get("checkpoint_map"),
        }

    async def copy_thread(self, thread: ThreadRecord) -> ThreadRecord:
        """Copy a thread with every checkpoint (subgraphs' too) under a new id; return it.

        The runs and their event logs stay with the original (as on the Platform).
        """
        copy = dataclasses.replace(
            thread, thread_id=str(uuid.uuid4()), created_at=now(), updated_at=now()
        )
        if copy.status == "busy":
            copy.status = "idle"
        await self.threads.insert(copy)
        await copy_thread_checkpoints(self.checkpointer, thread.thread_id, copy.thread_id)
        return copy

    # -- recovery and retention ----------------------------------------------------

    async def recover(self) -> int:
        """Start the runs left pending or running that this process is not executing.

        At start-up these are the runs a previous process left behind; later (the
        sweep) the runs this process stopped without an outcome because the database
        took no writes. Returns how many were started.
        """
        resumed = 0
        async with self._lock:  # no run is between its insert and its start meanwhile
            if self._closing:
                return 0
            tails: dict[str, str] = {}  # thread → last run started, to keep threads in order
            for run in await self.runs.active():
                if self.executor.is_active(run.run_id):
                    continue
                self.events.reopen(run.run_id)  # what it queued before is void: start afresh
                next_id = await self.events.last_id(run.run_id) + 1
                if out_of_attempts(run.attempt, self.max_attempts):
                    try:
                        await self.executor.abandon(run, next_id)
                    except StoreError:
                        log.error("run %s: could not record its abandonment yet", run.run_id)
                    continue
                after = [tails[run.thread_id]] if run.thread_id in tails else []
                after += self.executor.active_on(run.thread_id)
                self.executor.start(run, after=after, next_id=next_id)
                tails[run.thread_id] = run.run_id
                resumed += 1
                log.info("resuming run %s (attempt %d)", run.run_id, run.attempt + 1)
        return resumed

    async def _sweep(self) -> None:
        """Every `recovery_interval` seconds, start the runs left without an outcome."""
        while True:
            await asyncio.sleep(self.recovery_interval)
            try:
                await self.recover()
            except Exception:  # the database is unreadable now: try again next time
                log.exception("the run recovery sweep failed")

    async def prune_events(self) -> int:
        """Prune the event logs of runs finished longer ago than EVENT_RETENTION_HOURS."""
        if self.event_retention_hours <= 0:
            return 0
        cutoff = datetime.now(UTC) - timedelta(hours=self.event_retention_hours)
        return await self.events.prune(cutoff.isoformat())


__all__ = ["RunManager"]
