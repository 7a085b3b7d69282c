"""The run manager: runs execute in tasks it owns, never in an HTTP request.

`create` checks and records a run, then starts an `asyncio` task that streams the
graph and appends every chunk to the run's event log as a frame with the next id
(see `app.runs.store`); SSE responses only follow the log (`app.sse`). So a client
that disconnects leaves no zombie node behind (`on_disconnect=continue` lets the
run finish for a later join, `cancel` cancels its task), and the same run can be
followed by any number of clients.

Cancellation is `Task.cancel()`, which LangGraph honours: the running node's
awaits (an LLM request included) are cancelled at once. The cancel reason decides
what the run's record says:

    interrupt   status interrupted, the checkpoints kept (resume later)
    rollback    the checkpoints this run wrote deleted, then the run itself (as on
                the Platform; its stream still ends with `end`)
    shutdown    nothing recorded: the run stays pending/running, and the next
                start-up resumes it from its last checkpoint (`recover`)

Storage failures: the event log retries a failing commit with backoff (see
`app.runs.store`). When it gives a run's writes up, the run's task is cancelled
(reason `storage`) and the run ends with an `error` frame (`StorageError`) and an
`end` frame, written from its first lost frame id so its ids stay gapless. When
even those cannot be written, the run is left as its record says (pending or
running): this process stops executing it, its streams are told it stalled, and
the recovery sweep below starts it again once the database takes writes.

Restart recovery: runs a previous process left pending or running are started
again under the same run id, a running one from its thread's last checkpoint
(when that checkpoint is its own) with `attempt` + 1, at most RUN_MAX_ATTEMPTS
executions in all. Their event logs continue after the last durable id, with a
new `metadata` frame telling the attempt. The same recovery runs every
RECOVERY_INTERVAL seconds while the server is up, for runs this process stopped
executing without an outcome (their storage failed).

One process owns a DATA_DIR: the busy check is one SQL statement and so atomic
across processes, but runs execute in the process that accepted them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, Self, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, Interrupt, StateSnapshot

from app.runs.assistants import Assistant
from app.runs.checkpoints import settle
from app.runs.frames import SCHEMA_VERSION, FrameTranslator, graph_modes, public_error
from app.runs.hub import Hub
from app.runs.serde import dumps, to_jsonable
from app.runs.store import (
    ACTIVE_STATUSES,
    Frame,
    RunRecord,
    RunStore,
    StoreError,
    ThreadRecord,
    now,
)
from graphs.context import AtelierContext

log = logging.getLogger(__name__)

_INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")
#: Seconds between sweeps for runs this process left without an outcome.
RECOVERY_INTERVAL = 5.0
#: What a client learns about a run whose event log could not be written.
STORAGE_ERROR = {
    "error": "StorageError",
    "message": "the run's events could not be saved; the run was stopped",
}


class RunsError(Exception):
    """A request the run manager refuses; `status` is the HTTP status to answer."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        """Describe the problem in one client-safe sentence.

        Args:
            message: The sentence.
            field: The request field at fault: a body path ("command.resume") or
                "header:<name>".
        """
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(RunsError):
    """The thread, run or assistant does not exist (for this caller)."""

    status = 404


class Conflict(RunsError):
    """The request conflicts with the thread's or run's current state."""

    status = 409


class Invalid(RunsError):
    """The request is well-formed but names something that cannot be done."""

    status = 422


class Unavailable(RunsError):
    """The database takes no writes now (locked past its busy timeout, or full)."""

    status = 503


class RunMetrics(Protocol):
    """What the run manager reports (implemented by `app.metrics.AtelierMetrics`)."""

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
    cancel_reason: str | None = None
    finishing: bool = False  # past the graph: cancelling now would lose the outcome
    started: float = field(default_factory=time.monotonic)


@dataclass
class _Outcome:
    status: str
    error: dict[str, str] | None = None
    cancel_reason: str | None = None


def request_fingerprint(thread_id: str | None, body: dict[str, Any]) -> str:
    """Return a stable hash of a run request (to tell a retried POST from a different one)."""
    return hashlib.sha256(dumps({"thread_id": thread_id, "body": body}).encode()).hexdigest()


class RunManager:
    """Create, execute, cancel, join and recover runs.

    Use as an async context manager: entering recovers runs a previous process left
    behind and prunes old event logs; leaving cancels the runs in flight without
    recording an outcome, so the next start resumes them.
    """

    def __init__(
        self,
        *,
        store: RunStore,
        hub: Hub,
        assistants: dict[str, Assistant],
        context: AtelierContext,
        checkpointer: BaseCheckpointSaver,
        run_timeout: float,
        max_attempts: int,
        event_retention_hours: float = 0,
        metrics: RunMetrics | None = None,
        callbacks: Sequence[BaseCallbackHandler] = (),
        recovery_interval: float = RECOVERY_INTERVAL,
    ) -> None:
        """Bind the manager to its store, fan-out, graphs and limits."""
        self.store = store
        self.hub = hub
        self.assistants = assistants
        self.context = context
        self.checkpointer = checkpointer
        self.run_timeout = run_timeout
        self.max_attempts = max_attempts
        self.event_retention_hours = event_retention_hours
        self.metrics = metrics
        self.callbacks = list(callbacks)
        self.recovery_interval = recovery_interval
        self._active: dict[str, _Active] = {}
        #: Record and result of runs deleted as they ended, for their /wait and /join.
        self._ended: dict[str, tuple[RunRecord, dict[str, Any]]] = {}
        self._lock = asyncio.Lock()  # serialises run creation (busy checks, strategies)
        self._closing = False
        self._sweeper: asyncio.Task[None] | None = None
        store.on_lost = self._on_lost

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
        tasks = []
        for active in list(self._active.values()):
            if active.task is not None and not active.finishing:
                active.cancel_reason = "shutdown"
                active.task.cancel()
            if active.task is not None:
                tasks.append(active.task)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await settle(self.checkpointer)
        await self.store.flush()

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
        return run_id in self._active

    async def wait(self, run_id: str) -> RunRecord | None:
        """Wait until the run is no longer pending or running; return its record."""
        active = self._active.get(run_id)
        if active is not None:
            await asyncio.shield(active.done)
        stored = await self.store.get_run(run_id)
        if stored is None and run_id in self._ended:
            return self._ended[run_id][0]  # deleted as it ended (rollback, on_completion)
        return stored

    async def result(self, run: RunRecord) -> dict[str, Any]:
        """Return what `/wait` and `/join` answer: the thread's values after the run.

        A failed run answers `{"__error__": {"error", "message"}}`; an interrupted
        one carries its pending interrupts under `__interrupt__`.
        """
        if run.status in ("error", "timeout"):
            return {"__error__": run.error or {"error": run.status, "message": run.status}}
        if run.run_id in self._ended:
            return self._ended[run.run_id][1]
        thread = await self.store.get_thread(run.owner, run.thread_id)
        if thread is None:
            return {}
        values = dict(thread.values or {})
        pending = [i for group in thread.interrupts.values() for i in group]
        if pending:
            values["__interrupt__"] = pending
        return values

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
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
        if self.callbacks:
            config["callbacks"] = list(self.callbacks)
        return config  # type: ignore[return-value]

    # -- create --------------------------------------------------------------------

    async def create(
        self,
        *,
        owner: str,
        thread_id: str | None,
        assistant: Assistant,
        kwargs: dict[str, Any],
        metadata: dict[str, Any],
        multitask_strategy: str,
        if_not_exists: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Record a run and start executing it.

        Args:
            owner: The caller's owner id.
            thread_id: The thread, or None for a thread-less run (a new thread).
            assistant: The assistant to run.
            kwargs: The validated run options: `input` (graph input) or `command`,
                `stream_mode` (list), `stream_subgraphs`, `stream_resumable`,
                `on_disconnect`, `config`.
            metadata: Stored with the run.
            multitask_strategy: reject | interrupt | rollback | enqueue.
            if_not_exists: create | reject (a missing thread).
            idempotency_key: A retried POST with the same key returns the same run.
            request_hash: Fingerprint of the request, to refuse a reused key.

        Returns:
            The run, and whether it was created now (False: an idempotent repeat).

        Raises:
            RunsError: NotFound, Conflict (busy thread, nothing to resume) or Invalid.
        """
        if self._closing:
            raise Conflict("the server is shutting down")
        async with self._lock:
            if idempotency_key is not None:
                existing = await self.store.find_idempotent_run(owner, idempotency_key)
                if existing is not None:
                    if existing.request_hash != request_hash:
                        raise Invalid(
                            "Idempotency-Key was already used for a different request",
                            field="header:Idempotency-Key",
                        )
                    return existing, False

            new_thread: ThreadRecord | None = None
            if thread_id is None or not await self._owned_thread(owner, thread_id):
                if thread_id is not None and if_not_exists != "create":
                    raise NotFound(f"thread {thread_id!r} not found")
                if thread_id is not None and await self.store.thread_exists(thread_id):
                    raise NotFound(f"thread {thread_id!r} not found")  # another owner's
                stamp = now()
                new_thread = ThreadRecord(
                    thread_id=thread_id or str(uuid.uuid4()),
                    owner=owner,
                    created_at=stamp,
                    updated_at=stamp,
                    metadata={
                        "graph_id": assistant.graph_id,
                        "assistant_id": assistant.assistant_id,
                    },
                )
            tid = new_thread.thread_id if new_thread else thread_id
            assert tid is not None

            previous: list[_Active] = []
            if new_thread is None:
                if kwargs.get("checkpoint"):  # before a strategy cancels anything
                    await self._check_checkpoint(tid, kwargs["checkpoint"])
                busy = await self.store.active_runs(tid)
                if busy and multitask_strategy == "reject":
                    raise Conflict(
                        f"thread {tid!r} is busy with run {busy[0].run_id!r} "
                        f"({busy[0].status}); multitask_strategy is reject"
                    )
                if busy and multitask_strategy in ("interrupt", "rollback"):
                    await self._cancel_all(busy, multitask_strategy)
                elif busy:  # enqueue: start after every active run of the thread
                    previous = [self._active[r.run_id] for r in busy if r.run_id in self._active]
                if kwargs.get("command"):
                    await self._check_command(
                        assistant, tid, kwargs["command"], kwargs.get("checkpoint")
                    )
                elif kwargs.get("input") is None:
                    await self._check_continuation(assistant, tid, kwargs.get("checkpoint"))
            elif (kwargs.get("command") or {}).get("resume") is not None:
                raise Conflict(f"thread {tid!r} has no pending interrupt to resume")
            elif kwargs.get("checkpoint"):
                raise NotFound(f"checkpoint {kwargs['checkpoint']['checkpoint_id']!r} not found")
            elif kwargs.get("input") is None and not kwargs.get("command"):
                raise Invalid("a run on a new thread needs input or command", field="input")

            stamp = now()
            run = RunRecord(
                run_id=str(uuid.uuid4()),
                thread_id=tid,
                owner=owner,
                assistant_id=assistant.assistant_id,
                status="pending",
                created_at=stamp,
                updated_at=stamp,
                kwargs=kwargs,
                multitask_strategy=multitask_strategy,
                metadata=metadata,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
            )
            try:
                stored = await self.store.insert_run(
                    run, new_thread=new_thread, exclusive=not previous
                )
            except sqlite3.OperationalError:  # nothing was written: the client may retry
                log.exception("could not record a new run")
                raise Unavailable("the server cannot record runs right now; retry later") from None
            if not stored:  # another process took the thread in between
                busy = await self.store.active_runs(tid)
                other = busy[0].run_id if busy else "?"
                raise Conflict(f"thread {tid!r} is busy with run {other!r}")
            self._start(run, after=previous, next_id=1)
            return run, True

    async def _owned_thread(self, owner: str, thread_id: str) -> bool:
        return await self.store.get_thread(owner, thread_id) is not None

    def _at_checkpoint(self, thread_id: str, checkpoint: dict[str, Any] | None) -> RunnableConfig:
        """Return the config of a thread's head, or of one of its checkpoints."""
        config = self.graph_config(thread_id)
        if checkpoint:
            config["configurable"].update(checkpoint)
        return config

    async def _check_checkpoint(self, thread_id: str, checkpoint: dict[str, Any]) -> None:
        """Refuse a start checkpoint the thread does not have."""
        found = await self.checkpointer.aget_tuple(self._at_checkpoint(thread_id, checkpoint))
        if found is None:
            raise NotFound(
                f"checkpoint {checkpoint['checkpoint_id']!r} not found on thread {thread_id!r}",
                field="checkpoint",
            )

    async def _check_continuation(
        self, assistant: Assistant, thread_id: str, checkpoint: dict[str, Any] | None
    ) -> None:
        """Refuse a run without input or command unless the thread has nodes left to run."""
        snapshot = await assistant.graph.aget_state(self._at_checkpoint(thread_id, checkpoint))
        if not snapshot.next:
            raise Invalid(
                "a run needs input or command; without them it continues a thread paused at "
                "a breakpoint, and this thread has nothing left to run",
                field="input",
            )

    async def _check_command(
        self,
        assistant: Assistant,
        thread_id: str,
        command: dict,
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        """Refuse a resume with nothing to resume, unknown interrupt ids or a wrong answer."""
        goto = command.get("goto")
        if goto is not None:
            targets = {goto} if isinstance(goto, str) else set(goto)
            unknown = sorted(targets - set(assistant.graph.nodes))
            if unknown:
                raise Invalid(f"command.goto names unknown nodes {unknown}", field="command.goto")
        if assistant.check_update is not None and command.get("resume") is None:
            goto_nodes = [goto] if isinstance(goto, str) else list(goto or [])
            update = command.get("update")
            await self._check_update(
                assistant,
                thread_id,
                update if isinstance(update, dict) else {},
                checkpoint,
                field="command.update",
                goto=goto_nodes,
            )
        if "resume" not in command or command["resume"] is None:
            return
        snapshot = await assistant.graph.aget_state(self._at_checkpoint(thread_id, checkpoint))
        pending: list[Interrupt] = list(snapshot.interrupts)
        if not pending:
            raise Conflict(f"thread {thread_id!r} has no pending interrupt to resume")
        resume = command["resume"]
        ids = {i.id for i in pending}
        if isinstance(resume, dict) and resume and all(_INTERRUPT_ID.match(k) for k in resume):
            unknown = sorted(set(resume) - ids)
            if unknown:
                raise Invalid(
                    f"command.resume names unknown interrupt ids {unknown}; pending: {sorted(ids)}",
                    field="command.resume",
                )
            answers = [(v, [i for i in pending if i.id == k]) for k, v in resume.items()]
        elif len(pending) > 1:
            raise Invalid(
                f"thread has {len(pending)} pending interrupts; resume with a map of "
                "interrupt id to answer",
                field="command.resume",
            )
        else:
            answers = [(resume, pending)]
        if assistant.check_resume is not None:
            for value, interrupts in answers:
                try:
                    assistant.check_resume(value, interrupts)
                except ValueError as exc:
                    raise Invalid(f"command.resume: {exc}", field="command.resume") from None

    async def _check_update(
        self,
        assistant: Assistant,
        thread_id: str,
        update: dict[str, Any],
        checkpoint: dict[str, Any] | None,
        *,
        field: str,
        goto: list[str],
    ) -> None:
        """Refuse a state update the assistant's `check_update` finds wrong for this thread."""
        assert assistant.check_update is not None
        snapshot = await assistant.graph.aget_state(self._at_checkpoint(thread_id, checkpoint))
        try:
            assistant.check_update(update, snapshot.values or {}, goto)
        except ValueError as exc:
            where = str(exc).split(":", 1)[0]
            raise Invalid(f"{field}.{exc}", field=f"{field}.{where}") from None

    # -- cancel --------------------------------------------------------------------

    async def cancel(self, run: RunRecord, action: str, *, wait: bool) -> RunRecord:
        """Cancel a pending or running run (`action` interrupt or rollback)."""
        active = self._active.get(run.run_id)
        if active is None or not run.active:
            raise Conflict(f"run {run.run_id!r} is not pending or running (status {run.status})")
        self._request_cancel(active, action)
        if wait:
            await asyncio.shield(active.done)
        return await self.store.get_run(run.run_id) or self._ended.get(run.run_id, (run, {}))[0]

    def cancel_soon(self, run_id: str, action: str = "interrupt") -> None:
        """Cancel a run if it is still executing (a disconnected `on_disconnect=cancel`)."""
        active = self._active.get(run_id)
        if active is not None:
            self._request_cancel(active, action)

    def _request_cancel(self, active: _Active, action: str) -> None:
        if active.finishing or active.task is None or active.task.done():
            return
        cancelled = active.cancel_reason is not None
        active.cancel_reason = action  # the latest reason decides the outcome
        if not cancelled:  # one cancel only: the handler uncancels exactly once
            active.task.cancel()

    async def _cancel_all(self, runs: Sequence[RunRecord], action: str) -> None:
        waits = []
        for run in runs:
            active = self._active.get(run.run_id)
            if active is not None:
                self._request_cancel(active, action)
                waits.append(active.done)
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits])

    async def delete_thread(self, owner: str, thread_id: str) -> None:
        """Cancel a thread's runs, then delete it with its runs, logs and checkpoints."""
        thread = await self.store.get_thread(owner, thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        await self._cancel_all(await self.store.active_runs(thread_id), "interrupt")
        await self.store.flush()
        await self.store.delete_thread(thread_id)
        await self.checkpointer.adelete_thread(thread_id)

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
        if as_node is not None and as_node not in graph.nodes:
            known = sorted(n for n in graph.nodes if n != "__start__")
            raise Invalid(
                f"as_node {as_node!r} is not a node of the graph; nodes: {known}", field="as_node"
            )
        if isinstance(values, dict):
            keys = {c for c in graph.channels if not c.startswith("__") and ":" not in c}
            unknown = sorted(set(values) - keys)
            if unknown:
                raise Invalid(
                    f"values names keys {unknown} that are not in the state; keys: {sorted(keys)}",
                    field="values",
                )
        async with self._lock:
            busy = await self.store.active_runs(thread.thread_id)
            if busy:
                raise Conflict(
                    f"thread {thread.thread_id!r} is busy with run {busy[0].run_id!r}; "
                    "update its state once the run ended"
                )
            if checkpoint:
                await self._check_checkpoint(thread.thread_id, checkpoint)
            if assistant.check_update is not None and isinstance(values, dict):
                await self._check_update(
                    assistant, thread.thread_id, values, checkpoint, field="values", goto=[]
                )
            config = self._at_checkpoint(thread.thread_id, checkpoint)
            try:
                written = await graph.aupdate_state(config, values, as_node=as_node)
            except (ValueError, KeyError, TypeError) as exc:
                raise Invalid(f"values: {public_error(exc)['message']}", field="values") from None
            probe = RunRecord(
                run_id="",
                thread_id=thread.thread_id,
                owner=thread.owner,
                assistant_id=assistant.assistant_id,
                status="success",
                created_at=now(),
                updated_at=now(),
                kwargs={},
                multitask_strategy="reject",
            )
            values_now, interrupts = await self._thread_state(probe)
            status = "interrupted" if interrupts else "idle"
            self.store.queue_statement(
                *RunStore.thread_state_statement(thread.thread_id, status, values_now, interrupts)
            )
            await self.store.flush()
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
        await self.store.insert_thread(copy)
        source = self.graph_config(thread.thread_id)
        tuples = [t async for t in self.checkpointer.alist(source)]
        for item in reversed(tuples):  # oldest first: each parent exists before its child
            ns = item.config["configurable"].get("checkpoint_ns", "")
            parent_id = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            target: dict[str, Any] = {"thread_id": copy.thread_id, "checkpoint_ns": ns}
            if parent_id:
                target["checkpoint_id"] = parent_id
            written = await self.checkpointer.aput(
                {"configurable": target},
                item.checkpoint,
                item.metadata,
                dict(item.checkpoint.get("channel_versions") or {}),
            )
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in item.pending_writes or ():
                by_task.setdefault(task_id, []).append((channel, value))
            for task_id, writes in by_task.items():
                await self.checkpointer.aput_writes(written, writes, task_id)
        return copy

    # -- execution -----------------------------------------------------------------

    def _start(self, run: RunRecord, *, after: Sequence[_Active], next_id: int) -> _Active:
        loop = asyncio.get_running_loop()
        run = dataclasses.replace(run)  # the task's own copy: it updates status and attempt
        active = _Active(run=run, next_id=next_id, done=loop.create_future())
        self._active[run.run_id] = active
        self.hub.run_live(run.run_id)
        if self.metrics is not None:
            self.metrics.run_started()
        active.task = asyncio.create_task(
            self._drive(active, [a.done for a in after]), name=f"run-{run.run_id}"
        )
        return active

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
        self.store.append(active.run.run_id, frame)

    def _on_lost(self, run_id: str) -> None:
        """The store gave a run's writes up: stop the run so it can end loudly."""
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
            if reason is None or reason == "shutdown":
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            await settle(self.checkpointer)
            if reason == "storage":
                return _Outcome("error", error=dict(STORAGE_ERROR))
            if reason == "rollback":
                deleted = await self.store.delete_run_checkpoints(run.thread_id, run.run_id)
                log.info("rolled back run %s: %d checkpoint(s) deleted", run.run_id, deleted)
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
        self.store.queue_statement(
            *RunStore.run_status_statement(run.run_id, "running", attempt=run.attempt),
            run_id=run.run_id,
        )
        # Commit the first frame before the graph starts: its first step may hold the
        # event loop for a while (CPU work before its first await), and clients should
        # learn the run is under way at once.
        await self.store.flush(run.run_id)
        modes = run.kwargs.get("stream_mode") or ["values"]
        translate = FrameTranslator(
            modes,
            subgraphs=bool(run.kwargs.get("stream_subgraphs")),
            keep_message=assistant.keep_message,
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
        if self.store.is_lost(run.run_id):
            # Continue the log from the first frame that did not make it: no gap.
            first = self.store.reopen(run.run_id)
            if first is not None:
                active.next_id = first
        if await settle(self.checkpointer):
            log.info("run %s: committed a checkpoint write its cancellation left open", run.run_id)
        if active.next_id == 1:  # cancelled before it started: the stream still opens with this
            self._emit(active, "metadata", self._metadata(run))
        values, interrupts = await self._thread_state(run)
        others = any(
            a.run.thread_id == run.thread_id and a is not active for a in self._active.values()
        )
        if others:
            thread_status = "busy"
        elif outcome.status in ("error", "timeout"):
            thread_status = "error"
        elif interrupts or (outcome.status == "interrupted" and outcome.cancel_reason is None):
            thread_status = "interrupted"  # an interrupt() or a breakpoint (interrupt_before/after)
        else:
            thread_status = "idle"
        if outcome.error is not None:
            self._emit(active, "error", outcome.error)
        self._emit(active, "end", {"run_id": run.run_id, "status": outcome.status})
        self.store.queue_statement(
            *RunStore.run_status_statement(
                run.run_id,
                outcome.status,
                attempt=run.attempt,
                cancel_reason=outcome.cancel_reason,
                error=outcome.error,
            ),
            run_id=run.run_id,
        )
        self.store.queue_statement(
            *RunStore.thread_state_statement(run.thread_id, thread_status, values, interrupts),
            run_id=run.run_id,
        )
        await self.store.flush(run.run_id)
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
        record = await self.store.get_run(run.run_id)
        if record is not None:
            self._ended[run.run_id] = (record, await self.result(record))
            while len(self._ended) > 256:
                self._ended.pop(next(iter(self._ended)))
        if delete_thread:
            await self.store.delete_thread(run.thread_id)
            await self.checkpointer.adelete_thread(run.thread_id)
            log.info(
                "deleted thread %s of run %s (on_completion delete)", run.thread_id, run.run_id
            )
        else:
            await self.store.delete_run(run.run_id)

    async def _thread_state(self, run: RunRecord) -> tuple[dict | None, dict]:
        """Return the thread's values and pending interrupts (by task id) after a run."""
        assistant = self.assistants.get(run.assistant_id)
        if assistant is None:
            return None, {}
        try:
            snapshot: StateSnapshot = await assistant.graph.aget_state(
                self.graph_config(run.thread_id)
            )
        except Exception:
            log.exception("could not read the state of thread %s", run.thread_id)
            return None, {}
        interrupts = {
            task.id: to_jsonable(list(task.interrupts))
            for task in snapshot.tasks
            if task.interrupts
        }
        values = to_jsonable(snapshot.values)
        return (values if isinstance(values, dict) else {"value": values}), interrupts

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
            tails: dict[str, _Active] = {}  # thread → last run started, to keep threads in order
            for run in await self.store.active_runs():
                if run.run_id in self._active:
                    continue
                self.store.reopen(run.run_id)  # what it queued before is void: start afresh
                next_id = await self.store.last_event_id(run.run_id) + 1
                if run.status == "running" and run.attempt >= self.max_attempts:
                    try:
                        await self._abandon(run, next_id)
                    except StoreError:
                        log.error("run %s: could not record its abandonment yet", run.run_id)
                    continue
                previous = [tails[run.thread_id]] if run.thread_id in tails else []
                previous += [a for a in self._active.values() if a.run.thread_id == run.thread_id]
                tails[run.thread_id] = self._start(run, after=previous, next_id=next_id)
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

    async def _abandon(self, run: RunRecord, next_id: int) -> None:
        error = {
            "error": "RunAbandoned",
            "message": f"the server stopped during each of the run's {run.attempt} attempts",
        }
        end = {"run_id": run.run_id, "status": "error"}
        self.store.append(run.run_id, Frame(next_id, "error", dumps(error)))
        self.store.append(run.run_id, Frame(next_id + 1, "end", dumps(end)))
        self.store.queue_statement(
            *RunStore.run_status_statement(run.run_id, "error", error=error), run_id=run.run_id
        )
        self.store.queue_statement(
            *RunStore.thread_state_statement(run.thread_id, "error"), run_id=run.run_id
        )
        try:
            await self.store.flush(run.run_id)
        finally:
            self.store.reopen(run.run_id)
        log.warning("abandoned run %s after %d attempts", run.run_id, run.attempt)

    async def prune_events(self) -> int:
        """Prune the event logs of runs finished longer ago than EVENT_RETENTION_HOURS."""
        if self.event_retention_hours <= 0:
            return 0
        cutoff = datetime.now(UTC) - timedelta(hours=self.event_retention_hours)
        return await self.store.prune_events(cutoff.isoformat())


__all__ = [
    "ACTIVE_STATUSES",
    "Conflict",
    "Invalid",
    "NotFound",
    "RunManager",
    "RunsError",
    "Unavailable",
    "request_fingerprint",
]
