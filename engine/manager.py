"""The run manager: the run engine's front door, composed of its parts.

    preparation  RunPreparer          checks a request, applies the multitask strategy
    executor     RunExecutor          the backend's: executes runs, or has them executed
    storage      RunStorage           threads, runs and event logs (the backend's)

`create` prepares a run under one lock (the busy check and the strategy must not
interleave with another creation), records it and hands it to the executor.

The manager is the routes' only door to the engine: threads (create, get, merge
metadata, search, count, state, history, update state, copy, delete), runs (get,
list, delete, cancel, wait, join), assistants (the built-in ones, and those a client
creates, versions and deletes: `engine.assistants`), and what a stream response follows
(`engine.protocols.RunFrames`). Its repositories, live fan-out, graphs and
checkpointer are its own (private); a thread's state and a run's result are read
by `engine.reads`.

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
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from engine import reads
from engine.assistants import Assistant, AssistantRecord, IfExists
from engine.crons import (
    CRON_POLL,
    CronRecord,
    CronScheduler,
    OnRunCompleted,
    check_schedule,
    check_timezone,
    iso,
    next_tick,
    parse_time,
    utc_now,
)
from engine.errors import Conflict, Invalid, InvalidFields, NotFound, RunsError, Unavailable
from engine.feedback import MAX_FEEDBACK_PER_RUN, FeedbackRecord
from engine.frames import public_error
from engine.preparation import RunPreparer, RunRequest, check_context
from engine.protocols import (
    AssistantExists,
    CronTick,
    ExecutorSetup,
    RunBackend,
    RunExecutor,
    StorageUnavailable,
    StoreError,
    Subscription,
    ThreadExists,
)
from engine.records import (
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    ThreadRecord,
    ThreadStateChange,
    ThreadStatus,
    now,
    out_of_attempts,
)
from engine.webhooks import OutboxTotals, check_webhook

log = logging.getLogger(__name__)

#: Seconds between sweeps for runs this process left without an outcome.
RECOVERY_INTERVAL = 5.0
#: Ticks one pass of the cron scheduler fires at most (the rest wait for the next pass).
TICKS_PER_PASS = 100


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
        cron_interval: float = 0,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """Bind the manager to a backend, and take the executor it gives for `setup`.

        Args:
            backend: Storage, live frames and checkpoints, and the executor runs get.
            setup: The graphs served, their context and the limits runs execute with.
            max_attempts: RUN_MAX_ATTEMPTS.
            event_retention_hours: EVENT_RETENTION_HOURS (0: event logs are kept).
            recovery_interval: Seconds between recovery sweeps, where the backend
                leaves recovery to this process (0: none).
            cron_interval: Seconds between two looks for due crons (0: this process
                fires none, e.g. `atelier run`).
            clock: The crons' clock (tests move it on instead of waiting).
        """
        self._storage = backend.storage
        self._threads = backend.storage.threads
        self._runs = backend.storage.runs
        self._events = backend.storage.events
        self._hub = backend.live
        self._assistants = setup.assistants
        self._tracing = setup.tracing
        self._created = backend.assistants
        self._checkpointer = backend.checkpointer
        self._checkpoints = backend.checkpoints
        self.max_attempts = max_attempts
        self.event_retention_hours = event_retention_hours
        self.recovery_interval = recovery_interval if backend.recovers_runs else 0
        self.executor: RunExecutor = backend.executor(setup)
        self.preparation = RunPreparer(
            storage=self._storage,
            executor=self.executor,
            checkpointer=self._checkpointer,
            webhooks=setup.webhooks,
            tracing=setup.tracing,
        )
        self._lock = asyncio.Lock()  # serialises run creation (busy checks, strategies)
        self._closing = False
        self._sweeper: asyncio.Task[None] | None = None
        self._crons = backend.crons
        self.cron_scheduler = CronScheduler(
            self.fire_due_crons, clock=clock, interval=cron_interval or CRON_POLL
        )
        self._fires_crons = cron_interval > 0
        self._feedback = backend.feedback

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.prune_events()
        await self.recover()
        if self.recovery_interval > 0:
            self._sweeper = asyncio.create_task(self._sweep(), name="run-recovery-sweep")
        if self._fires_crons:
            self.cron_scheduler.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        self._closing = True
        await self.cron_scheduler.stop()
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
            return self._assistants[assistant_id]
        except KeyError:
            known = ", ".join(sorted(self._assistants)) or "none"
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
        stored = await self._runs.get(run_id)
        ended = self.executor.ended(run_id)
        if stored is None and ended is not None:
            return ended[0]  # deleted as it ended (rollback, on_completion)
        return stored

    async def result(self, run: RunRecord) -> dict[str, Any]:
        """Return what `/wait` and `/join` answer: the thread's values after the run.

        A failed run answers `{"__error__": {"error", "message"}}`; an interrupted
        one carries its pending interrupts under `__interrupt__`.
        """
        ended = self.executor.ended(run.run_id)
        return await reads.run_result(run, self._threads.get, ended[1] if ended else None)

    async def deliveries(self, owner: str, thread_id: str, run_id: str) -> list[dict[str, Any]]:
        """Return the webhook deliveries of the owner's run, each with its attempts.

        Raises:
            NotFound: The owner has no such run on that thread.
        """
        if await self._runs.find(owner, thread_id, run_id) is None:
            raise NotFound(f"run {run_id!r} not found")
        return await self._storage.deliveries.for_run(run_id)

    async def webhook_totals(self) -> OutboxTotals:
        """Return the whole webhook outbox's deliveries by status and attempts by outcome."""
        return await self._storage.deliveries.totals()

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
                stored = await self._runs.insert(
                    run, new_thread=prepared.new_thread, exclusive=not prepared.after
                )
            except StorageUnavailable:  # nothing was written: the client may retry
                raise Unavailable(
                    "the database cannot record runs right now (nothing was written); retry later"
                ) from None
            if not stored:  # another process took the thread in between
                busy = await self._runs.active(run.thread_id)
                other = busy[0].run_id if busy else "?"
                raise Conflict(f"thread {run.thread_id!r} is busy with run {other!r}")
            if prepared.thread_metadata:  # the title and assistant an older thread lacks
                await self._threads.merge_metadata(
                    run.owner, run.thread_id, prepared.thread_metadata
                )
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
        return await self._runs.get(run.run_id) or (ended[0] if ended else run)

    def cancel_soon(self, run_id: str, action: CancelAction = "interrupt") -> None:
        """Cancel a run if it is still executing (a disconnected `on_disconnect=cancel`)."""
        self.executor.cancel(run_id, action)

    async def delete_thread(self, owner: str, thread_id: str) -> None:
        """Cancel a thread's runs, then delete it with its runs, logs and checkpoints."""
        await self.get_thread(owner, thread_id)
        busy = await self._runs.active(thread_id)
        await self.executor.cancel_all([r.run_id for r in busy], "interrupt")
        await self._events.flush()
        await self._threads.delete(thread_id)
        await self._checkpoints.delete_thread(thread_id)

    # -- thread state --------------------------------------------------------------

    async def update_state(
        self,
        owner: str,
        thread_id: str,
        values: Any,
        *,
        as_node: str | None,
        checkpoint: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Write a state update through the graph's own `aupdate_state`; return the new checkpoint.

        Refused while the thread has an active run (its next checkpoint would race the
        update). The thread record's values and status follow the new head.

        Raises:
            RunsError: NotFound (thread, checkpoint), Conflict (no graph ran on the
                thread yet, busy thread) or Invalid (update).
        """
        thread = await self.get_thread(owner, thread_id)
        assistant = self._assistant_of(thread)
        if assistant is None:
            raise Conflict(f"thread {thread_id!r} has no graph yet; start a run on it first")
        graph = assistant.graph
        self.preparation.check_state_update(assistant, values, as_node)
        async with self._lock:
            busy = await self._runs.active(thread_id)
            if busy:
                raise Conflict(
                    f"thread {thread_id!r} is busy with run {busy[0].run_id!r}; "
                    "update its state once the run ended"
                )
            if checkpoint:
                await self.preparation.check_checkpoint(thread_id, checkpoint)
            if assistant.spec.check_update is not None and isinstance(values, dict):
                await self.preparation.check_update(
                    assistant, thread_id, values, checkpoint, field="values", goto=[]
                )
            config = self.preparation.at_checkpoint(thread_id, checkpoint)
            try:
                written = await graph.aupdate_state(config, values, as_node=as_node)
            except (ValueError, KeyError, TypeError) as exc:
                raise Invalid(f"values: {public_error(exc)['message']}", field="values") from None
            values_now, interrupts = await reads.thread_values(assistant, thread_id)
            status: ThreadStatus = "interrupted" if interrupts else "idle"
            self._events.record(ThreadStateChange(thread_id, status, values_now, interrupts))
            await self._events.flush()
        configurable = dict(written.get("configurable") or {})
        return {
            "thread_id": thread_id,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint_map": configurable.get("checkpoint_map"),
        }

    async def copy_thread(self, owner: str, thread_id: str) -> ThreadRecord:
        """Copy a thread with every checkpoint (subgraphs' too) under a new id; return it.

        The runs and their event logs stay with the original (as on the Platform).
        """
        thread = await self.get_thread(owner, thread_id)
        copy = dataclasses.replace(
            thread, thread_id=str(uuid.uuid4()), created_at=now(), updated_at=now()
        )
        if copy.status == "busy":
            copy.status = "idle"
        await self._threads.insert(copy)
        await self._checkpoints.copy_thread(thread.thread_id, copy.thread_id)
        return copy

    # -- threads, runs, assistants and streams, as routes ask for them -------------

    def _assistant_of(self, thread: ThreadRecord) -> Assistant | None:
        """Return the assistant whose graph ran on the thread, or None when none has yet."""
        return self._assistants.get(str(thread.metadata.get("graph_id", "")))

    def _graph_of(self, thread: ThreadRecord) -> Any:
        """Return the graph that ran on the thread, or None when none has yet."""
        assistant = self._assistant_of(thread)
        return assistant.graph if assistant is not None else None

    async def create_thread(
        self,
        owner: str,
        thread_id: str | None,
        metadata: dict[str, Any],
        *,
        if_exists: str = "raise",
    ) -> ThreadRecord:
        """Create a thread (a UUID unless `thread_id` is given); return it.

        Args:
            owner: The caller.
            thread_id: The id asked for, or None.
            metadata: Its metadata.
            if_exists: `do_nothing` returns the caller's thread that has the id already.

        Raises:
            Conflict: The id is taken (by another owner, or with `raise`).
        """
        thread_id = thread_id or str(uuid.uuid4())
        existing = await self._threads.get(owner, thread_id)
        if existing is not None and if_exists == "do_nothing":
            return existing
        stamp = now()
        thread = ThreadRecord(
            thread_id=thread_id, owner=owner, created_at=stamp, updated_at=stamp, metadata=metadata
        )
        try:
            await self._threads.insert(thread)
        except ThreadExists:
            raise Conflict(f"thread {thread_id!r} already exists") from None
        return thread

    async def get_thread(self, owner: str, thread_id: str) -> ThreadRecord:
        """Return the owner's thread; raise NotFound (also when another owner has it)."""
        thread = await self._threads.get(owner, thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        return thread

    async def patch_thread(
        self, owner: str, thread_id: str, metadata: dict[str, Any]
    ) -> ThreadRecord:
        """Merge keys into a thread's metadata (atomically: concurrent patches all land)."""
        thread = await self._threads.merge_metadata(owner, thread_id, metadata)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        return thread

    async def search_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
        ids: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[ThreadRecord]:
        """Return the owner's threads matching every given filter."""
        return await self._threads.search(
            owner,
            metadata=metadata,
            status=status,
            ids=ids,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )

    async def count_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
    ) -> int:
        """Return how many of the owner's threads match every given filter."""
        return await self._threads.count(owner, metadata=metadata, status=status)

    async def thread_state(
        self, owner: str, thread_id: str, *, subgraphs: bool = False
    ) -> dict[str, Any]:
        """Return a thread's latest checkpointed state (empty before its first run)."""
        thread = await self.get_thread(owner, thread_id)
        return await reads.state(self._graph_of(thread), thread_id, subgraphs=subgraphs)

    async def thread_state_at(
        self, owner: str, thread_id: str, checkpoint: dict[str, Any], *, subgraphs: bool = False
    ) -> dict[str, Any]:
        """Return a thread's state at a checkpoint (see `engine.reads.state_at`)."""
        thread = await self.get_thread(owner, thread_id)
        return await reads.state_at(
            self._graph_of(thread), thread_id, checkpoint, subgraphs=subgraphs
        )

    async def thread_history(
        self,
        owner: str,
        thread_id: str,
        *,
        limit: int,
        before: str | None = None,
        metadata: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Return a thread's past states, newest first (see `engine.reads.history`)."""
        thread = await self.get_thread(owner, thread_id)
        return await reads.history(
            self._graph_of(thread),
            thread_id,
            limit=limit,
            before=before,
            metadata=metadata,
            checkpoint=checkpoint,
        )

    async def get_run(self, owner: str, thread_id: str, run_id: str) -> RunRecord:
        """Return the owner's run on a thread; raise NotFound."""
        run = await self._runs.find(owner, thread_id, run_id)
        if run is None:
            raise NotFound(f"run {run_id!r} not found on thread {thread_id!r}")
        return run

    async def find_run(self, run_id: str) -> RunRecord | None:
        """Return any owner's run by id, or None: for trusted callers in this process.

        `atelier run --resume RUN_ID` finds the run a killed process left behind; routes
        use `get_run`, which answers only the run's owner.
        """
        return await self._runs.get(run_id)

    async def list_runs(
        self,
        owner: str,
        thread_id: str,
        *,
        limit: int = 10,
        offset: int = 0,
        status: RunStatus | None = None,
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first; raise NotFound for another's thread."""
        await self.get_thread(owner, thread_id)
        return await self._runs.for_thread(thread_id, limit=limit, offset=offset, status=status)

    async def delete_run(self, owner: str, thread_id: str, run_id: str) -> None:
        """Delete a finished run and its event log; an active one is a Conflict."""
        run = await self.get_run(owner, thread_id, run_id)
        if run.active:
            raise Conflict(f"run {run_id!r} is {run.status}; cancel it first")
        await self._runs.delete(run_id)

    async def join(self, run_id: str) -> dict[str, Any]:
        """Wait until the run ended; return its result (`{}` when it is gone)."""
        run = await self.wait(run_id)
        return await self.result(run) if run else {}

    def list_assistants(self) -> list[Assistant]:
        """Return the built-in assistants this server runs (one per graph)."""
        return list(self._assistants.values())

    # -- assistants clients create ---------------------------------------------------

    async def resolve_assistant(self, owner: str, assistant_id: str) -> Assistant:
        """Return a built-in assistant, or the owner's created one at its latest version.

        Raises:
            NotFound: Neither (also when another owner created it).
        """
        builtin = self._assistants.get(assistant_id)
        if builtin is not None:
            return builtin
        record = await self._created.get(owner, assistant_id)
        if record is None:
            known = ", ".join(sorted(self._assistants)) or "none"
            raise NotFound(
                f"assistant {assistant_id!r} not found; the built-in ones are: {known}",
                field="assistant_id",
            )
        return self._served(record)

    def _served(self, record: AssistantRecord) -> Assistant:
        """Return the graph of a created assistant, served as that assistant.

        Raises:
            NotFound: This server no longer serves its graph.
        """
        builtin = self._assistants.get(record.graph_id)
        if builtin is None:
            raise NotFound(
                f"assistant {record.assistant_id!r} runs graph {record.graph_id!r}, "
                "which this server does not serve",
                field="assistant_id",
            )
        return builtin.with_record(record)

    def _check_assistant(
        self, graph_id: str, config: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        """Check an assistant's graph and context against the graph's context type.

        Returns:
            The context as the context type validated it.

        Raises:
            InvalidFields: The graph is unknown (`graph_id`), or the context (or the
                preset fields of `config.configurable`, for an atelier assistant)
                breaks the context type's rules, naming `context.<field>`.
        """
        builtin = self._assistants.get(graph_id)
        if builtin is None:
            known = ", ".join(sorted(self._assistants))
            raise InvalidFields.at("graph_id", f"unknown graph {graph_id!r}; graphs: {known}")
        context_type = builtin.spec.context_type
        if context_type is None:
            return context
        return check_context(context_type, context, config)

    async def create_assistant(
        self,
        owner: str,
        *,
        graph_id: str,
        assistant_id: str | None = None,
        config: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        if_exists: IfExists = "raise",
    ) -> Assistant:
        """Create an assistant of a graph (version 1, the latest), owned by `owner`.

        Raises:
            RunsError: Conflict (the id is a built-in one's, or taken: `if_exists`
                `do_nothing` returns the owner's own), InvalidFields (graph, context).
        """
        assistant_id = assistant_id or str(uuid.uuid4())
        if assistant_id in self._assistants:
            raise Conflict(
                f"assistant {assistant_id!r} is a built-in assistant; choose another id",
                field="assistant_id",
            )
        config, context = dict(config or {}), dict(context or {})
        context = self._check_assistant(graph_id, config, context)
        if if_exists == "do_nothing":
            existing = await self._created.get(owner, assistant_id)
            if existing is not None:
                return self._served(existing)
        stamp = now()
        record = AssistantRecord(
            assistant_id=assistant_id,
            owner=owner,
            graph_id=graph_id,
            version=1,
            name=name or "Untitled",
            description=description,
            config=config,
            context=context,
            metadata=metadata or {},
            created_at=stamp,
            updated_at=stamp,
        )
        try:
            await self._created.insert(record)
        except AssistantExists:
            raise Conflict(f"assistant {assistant_id!r} already exists") from None
        return self._served(record)

    async def _owned(self, owner: str, assistant_id: str, verb: str) -> AssistantRecord:
        """Return the owner's created assistant to change; refuse a built-in one.

        Raises:
            RunsError: Conflict (a built-in assistant is read-only) or NotFound.
        """
        if assistant_id in self._assistants:
            raise Conflict(
                f"assistant {assistant_id!r} is built in and read-only: it cannot be {verb}; "
                "create an assistant of its graph instead (POST /assistants)",
                field="assistant_id",
            )
        record = await self._created.get(owner, assistant_id)
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")
        return record

    async def update_assistant(
        self, owner: str, assistant_id: str, changes: dict[str, Any]
    ) -> Assistant:
        """Write a new version of the owner's assistant, which becomes the latest.

        Args:
            owner: The caller.
            assistant_id: The assistant.
            changes: New `graph_id`, `config`, `context`, `name`, `description`
                (each replaces the latest version's), and `metadata` (merged into it).

        Raises:
            RunsError: Conflict (built-in), NotFound, InvalidFields (graph, context).
        """
        latest = await self._owned(owner, assistant_id, "updated")
        changes = {k: v for k, v in changes.items() if v is not None or k == "description"}
        if "metadata" in changes:
            changes["metadata"] = {**latest.metadata, **changes["metadata"]}
        graph_id = changes.get("graph_id", latest.graph_id)
        config = changes.get("config", latest.config)
        context = self._check_assistant(graph_id, config, changes.get("context", latest.context))
        if "context" in changes or "graph_id" in changes:
            changes["context"] = context
        record = await self._created.update(owner, assistant_id, changes, now())
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")
        return self._served(record)

    async def delete_assistant(self, owner: str, assistant_id: str) -> None:
        """Delete the owner's assistant with its versions (its runs' threads stay)."""
        await self._owned(owner, assistant_id, "deleted")
        if not await self._created.delete(owner, assistant_id):
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")

    async def assistant_versions(
        self,
        owner: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Return an assistant's versions, newest first (a built-in one has one)."""
        builtin = self._assistants.get(assistant_id)
        if builtin is not None:
            shown = builtin.to_json()
            matches = all(shown["metadata"].get(k) == v for k, v in (metadata or {}).items())
            return [shown][offset : offset + limit] if matches else []
        await self.resolve_assistant(owner, assistant_id)
        found = await self._created.versions(
            owner, assistant_id, metadata=metadata, limit=limit, offset=offset
        )
        return [record.to_json() for record in found]

    async def set_latest_version(self, owner: str, assistant_id: str, version: int) -> Assistant:
        """Make one of the owner's assistant's versions the latest, the one runs use.

        Raises:
            RunsError: Conflict (built-in) or NotFound (assistant, version).
        """
        await self._owned(owner, assistant_id, "changed")
        record = await self._created.set_latest(owner, assistant_id, version)
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} has no version {version}", field="version")
        return self._served(record)

    def _builtins_matching(
        self, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
    ) -> list[Assistant]:
        return [
            a
            for a in self._assistants.values()
            if (graph_id is None or a.graph_id == graph_id)
            and (name is None or a.spec.name == name)
            and not metadata  # built-in assistants carry no metadata: any filter excludes them
        ]

    async def search_assistants(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str | None = None,
        sort_order: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return the assistants matching every filter: the built-in ones, then the owner's.

        Without `sort_by` the built-in ones come first (as the server lists them), then
        the owner's newest first; with it, all of them in that order.
        """
        order = sort_order or ("asc" if sort_by is not None else "desc")
        builtins = [a.to_json() for a in self._builtins_matching(graph_id, name, metadata)]
        created = await self._created.search(
            owner,
            graph_id=graph_id,
            name=name,
            metadata=metadata,
            limit=offset + limit,  # the page may start among the built-in ones
            offset=0,
            sort_by=sort_by or "created_at",
            sort_order=order,
        )
        found = builtins + [record.to_json() for record in created]
        if sort_by is not None:
            key = sort_by
            found.sort(key=lambda a: str(a[key] or ""), reverse=order == "desc")
        return found[offset : offset + limit]

    async def count_assistants(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many assistants match every filter (the built-in ones and the owner's)."""
        created = await self._created.count(owner, graph_id=graph_id, name=name, metadata=metadata)
        return len(self._builtins_matching(graph_id, name, metadata)) + created

    async def created_assistants(
        self, owner: str, *, limit: int, offset: int = 0
    ) -> tuple[list[Assistant], bool]:
        """Return a page of the owner's created assistants, oldest first, each ready to run.

        Oldest first, so that paging on by `offset` while the owner creates more
        neither skips nor repeats one. An assistant whose graph this server no longer
        serves is left out of its page.

        Returns:
            The page's assistants at their latest versions, and whether more follow.
        """
        records = await self._created.search(
            owner, limit=limit + 1, offset=offset, sort_by="created_at", sort_order="asc"
        )
        served = [self._served(r) for r in records[:limit] if r.graph_id in self._assistants]
        return served, len(records) > limit

    # `engine.protocols.RunFrames`: what a stream response follows.

    async def read_frames(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        return await self._events.read(run_id, after, limit)

    async def last_frame_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        return await self._events.last_id(run_id)

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run's live frames."""
        return self._hub.subscribe(run_id)

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; idempotent."""
        self._hub.unsubscribe(sub)

    def is_live(self, run_id: str) -> bool:
        """Whether the run is being executed (by any process: its followers may wait)."""
        return self._hub.is_live(run_id)

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
            for run in await self._runs.active():
                if self.executor.is_active(run.run_id):
                    continue
                self._events.reopen(run.run_id)  # what it queued before is void: start afresh
                next_id = await self._events.last_id(run.run_id) + 1
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
        return await self._events.prune(cutoff.isoformat())

    # -- crons ---------------------------------------------------------------------

    async def create_cron(
        self,
        owner: str,
        *,
        assistant_id: str,
        thread_id: str | None,
        schedule: str,
        timezone: str | None = None,
        payload: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        on_run_completed: OnRunCompleted | None = None,
        end_time: datetime | None = None,
        enabled: bool = True,
    ) -> CronRecord:
        """Store a cron whose ticks start runs of `assistant_id`; return it.

        Args:
            owner: The caller, who owns the cron and its runs.
            assistant_id: The assistant each run runs.
            thread_id: The caller's thread every run goes to, or None (a new thread each).
            schedule: Five-field cron expression.
            timezone: IANA time zone the schedule is read in (None: UTC).
            payload: The runs' options (input, config, stream options, webhook,
                interrupt_before/after, durability, multitask_strategy).
            metadata: The cron's metadata (its runs carry it, with `cron_id`).
            on_run_completed: Thread-less crons: delete or keep each run's thread.
            end_time: No tick after it.
            enabled: False: no tick until it is enabled.

        Raises:
            RunsError: NotFound (assistant, thread) or Invalid (schedule, timezone,
                end_time, the run options).
        """
        if thread_id is not None:
            await self.get_thread(owner, thread_id)
            if on_run_completed is not None:
                raise Invalid(
                    "on_run_completed applies to crons without a thread", field="on_run_completed"
                )
        stamp = iso(self.cron_scheduler.clock()) or ""
        cron = CronRecord(
            cron_id=str(uuid.uuid4()),
            owner=owner,
            assistant_id=assistant_id,
            thread_id=thread_id,
            schedule=schedule,
            timezone=timezone,
            payload=payload,
            metadata=metadata or {},
            on_run_completed=on_run_completed,
            end_time=iso(end_time),
            enabled=enabled,
            created_at=stamp,
            updated_at=stamp,
        )
        await self._check_cron(cron)
        await self._crons.insert(cron)
        return cron

    async def get_cron(self, owner: str, cron_id: str) -> CronRecord:
        """Return the owner's cron; raise NotFound (also when another owner has it)."""
        cron = await self._crons.get(owner, cron_id)
        if cron is None:
            raise NotFound(f"cron {cron_id!r} not found")
        return cron

    async def update_cron(self, owner: str, cron_id: str, changes: dict[str, Any]) -> CronRecord:
        """Change some of a cron's fields; return it.

        A new schedule, time zone, end time or `enabled` recomputes its next tick from
        now; other changes keep it. The write is refused when a tick was fired since
        the cron was read (its `next_run_at` moved), and the update is made again on
        the cron as it is then, so an update never brings back a tick already fired.

        Args:
            owner: The caller.
            cron_id: The cron.
            changes: New values of `schedule`, `timezone`, `end_time` (a datetime or
                None), `enabled`, `metadata`, `on_run_completed`, and run options that
                replace those in its payload (`payload`).

        Raises:
            RunsError: NotFound, or Invalid as `create_cron` raises it.
        """
        while True:
            cron = await self.get_cron(owner, cron_id)
            updated = dataclasses.replace(
                cron, payload={**cron.payload, **changes.get("payload", {})}
            )
            for name in ("schedule", "timezone", "enabled", "metadata", "on_run_completed"):
                if name in changes:
                    setattr(updated, name, changes[name])
            if "end_time" in changes:
                updated.end_time = iso(changes["end_time"])
            if updated.thread_id is not None and updated.on_run_completed is not None:
                raise Invalid(
                    "on_run_completed applies to crons without a thread", field="on_run_completed"
                )
            updated.updated_at = iso(self.cron_scheduler.clock()) or ""
            await self._check_cron(updated)
            if not {"schedule", "timezone", "end_time", "enabled"} & set(changes):
                updated.next_run_at = cron.next_run_at
            if await self._crons.replace(updated, previous_next_run_at=cron.next_run_at):
                return updated

    async def delete_cron(self, owner: str, cron_id: str) -> None:
        """Delete the owner's cron: it fires no more (its runs so far stay)."""
        if not await self._crons.delete(owner, cron_id):
            raise NotFound(f"cron {cron_id!r} not found")

    async def search_crons(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[CronRecord]:
        """Return the owner's crons matching every given filter."""
        return await self._crons.search(
            owner,
            assistant_id=assistant_id,
            thread_id=thread_id,
            enabled=enabled,
            metadata=metadata,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )

    async def count_crons(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's crons match every given filter."""
        return await self._crons.count(
            owner, assistant_id=assistant_id, thread_id=thread_id, metadata=metadata
        )

    async def _check_cron(self, cron: CronRecord) -> None:
        """Check a cron's schedule, time zone and run request; set its next tick.

        Raises:
            RunsError: NotFound (assistant) or Invalid, naming the field.
        """
        try:
            cron.schedule = check_schedule(cron.schedule)
        except ValueError as exc:
            raise Invalid(str(exc), field="schedule") from None
        try:
            cron.timezone = check_timezone(cron.timezone)
        except ValueError as exc:
            raise Invalid(str(exc), field="timezone") from None
        self.preparation.check_request(await self._cron_request(cron))
        # Each tick's run is checked again; refuse at once what every tick would refuse.
        check_webhook(cron.payload.get("webhook"), self.preparation.webhooks)
        tick = next_tick(
            cron.schedule, cron.timezone, self.cron_scheduler.clock(), parse_time(cron.end_time)
        )
        cron.next_run_at = iso(tick)

    async def _cron_request(self, cron: CronRecord) -> RunRequest:
        """Return the run request a cron's tick makes (checked like a client's)."""
        payload = cron.payload
        kwargs: dict[str, Any] = {
            "input": payload.get("input"),
            "command": None,
            "stream_mode": payload.get("stream_mode") or ["values"],
            "stream_subgraphs": bool(payload.get("stream_subgraphs")),
            "stream_resumable": bool(payload.get("stream_resumable")),
            "on_disconnect": "continue",
            "config": payload.get("config") or {},
        }
        options = {
            "interrupt_before": payload.get("interrupt_before"),
            "interrupt_after": payload.get("interrupt_after"),
            "durability": payload.get("durability"),
            "webhook": payload.get("webhook"),
            "on_completion": cron.on_run_completed if cron.thread_id is None else None,
        }
        kwargs.update({key: value for key, value in options.items() if value is not None})
        return RunRequest(
            owner=cron.owner,
            thread_id=cron.thread_id,
            assistant=await self.resolve_assistant(cron.owner, cron.assistant_id),
            kwargs=kwargs,
            metadata={**cron.metadata, "cron_id": cron.cron_id},
            multitask_strategy=payload.get("multitask_strategy") or "reject",
        )

    async def fire_due_crons(self, now: datetime) -> int:
        """Fire every cron due at `now` (the scheduler's pass); return how many runs started.

        Each tick is claimed (`CronRepository.claim_due`), its run prepared like any run
        request, and recorded in the transaction that moves the cron's `next_run_at` to
        its first tick after `now` (missed ticks are not made up). A tick whose request
        is refused (its thread is gone or busy, its assistant unknown) is spent without
        a run, logged.
        """
        started = 0
        for _ in range(TICKS_PER_PASS):
            async with self._lock:
                if self._closing:
                    break
                async with self._crons.claim_due(iso(now) or "") as tick:
                    if tick is None:
                        break
                    fired = await self._fire(tick, now)
                if fired is not None:  # committed: now a worker (or this process) may start it
                    run, after = fired
                    self.executor.start(run, after=after, next_id=1)
                    started += 1
        return started

    async def _fire(self, tick: CronTick, now: datetime) -> tuple[RunRecord, list[str]] | None:
        """Record a claimed tick's run and spend the tick; return the run to start, if any."""
        cron = tick.cron
        following = iso(next_tick(cron.schedule, cron.timezone, now, parse_time(cron.end_time)))
        try:
            prepared = await self.preparation.prepare(await self._cron_request(cron))
        except RunsError as exc:
            log.warning("cron %s: tick %s skipped: %s", cron.cron_id, cron.next_run_at, exc)
            await tick.fire(following, None)
            return None
        if prepared.new_thread is not None:
            prepared.new_thread.metadata["cron_id"] = cron.cron_id
        stored = await tick.fire(
            following,
            prepared.run,
            new_thread=prepared.new_thread,
            exclusive=not prepared.after,
        )
        if not stored:
            log.warning(
                "cron %s: tick %s skipped: its thread is busy", cron.cron_id, cron.next_run_at
            )
            return None
        log.info(
            "cron %s: tick %s started run %s", cron.cron_id, cron.next_run_at, prepared.run.run_id
        )
        return prepared.run, prepared.after

    # -- feedback (engine/feedback.py) -----------------------------------------------

    async def _owned_run(self, owner: str, run_id: str) -> RunRecord:
        """Return the owner's run by id alone; raise NotFound (also for another's run)."""
        run = await self._runs.get(run_id)
        if run is None or run.owner != owner:
            raise NotFound(f"run {run_id!r} not found")
        return run

    async def add_feedback(
        self, owner: str, run_id: str, *, key: str, score: float, comment: str | None
    ) -> FeedbackRecord:
        """Record the owner's feedback on their run and its trace; raise NotFound or Conflict."""
        run = await self._owned_run(owner, run_id)
        feedback = FeedbackRecord(
            feedback_id=str(uuid.uuid4()),
            run_id=run.run_id,
            thread_id=run.thread_id,
            owner=owner,
            key=key,
            score=score,
            comment=comment,
            created_at=now(),
        )
        if not await self._feedback.add(feedback, limit=MAX_FEEDBACK_PER_RUN):
            raise Conflict(
                f"run {run_id!r} already has {MAX_FEEDBACK_PER_RUN} feedback entries, "
                "the most a run keeps"
            )
        if self._tracing is not None:  # a feedback event on the run's trace, if it has one
            self._tracing.record_feedback(run, key=key, score=score, comment=comment)
        return feedback

    async def list_feedback(self, owner: str, run_id: str) -> list[FeedbackRecord]:
        """Return the feedback on the owner's run, oldest first; raise NotFound."""
        await self._owned_run(owner, run_id)
        return await self._feedback.for_run(run_id)


__all__ = ["RunManager"]
