"""The seams of the run engine, each a small protocol.

    RunBackend        one deployment's storage, live frames, checkpointer and
                      checkpoint housekeeping, and the executor runs get
                      (`engine.sqlite.backend.open_sqlite_backend`,
                      `engine.postgres.backend.open_postgres_backend`)
    RunExecutor       executes runs, or has them executed, and answers for them
                      (`engine.executor.InProcessExecutor`: tasks of this process;
                      `engine.postgres.queue.QueueExecutor`: the workers of the queue)

The engine's opener (`engine.opener.open_engine`) composes them into the services
adapters talk to (`engine.services`); a stream response follows a run through the
runs service (`RunFrames`). An executor is built from the backend's parts and one
`ExecutorSetup` (the graphs, their context, the limits), the only list of what
executing a run needs. Storage is three parts, each
with one implementation per backend (`engine/sqlite/`, `engine/postgres/`):

    ThreadRepository  threads: get, search, count, insert, merge metadata, delete
    RunRepository     runs: insert (with the busy check), get, find, list, delete;
                      claiming a pending run for execution belongs here as well
    EventLog          each run's frames: append, read after an id, prune; the
                      status and thread-state changes that go with them, and the
                      webhook delivery queued with a run's end (`engine.webhooks`)

and `LiveFrames`, the live fan-out a follower subscribes to (`engine.hub.Hub`),
which the event log feeds only with frames that are committed.
`CheckpointHousekeeping` is every write to LangGraph's checkpoint tables outside
the saver's own API, one per backend. The other resources' repositories (crons,
created assistants, feedback, campaigns, …) are built by the opener on the backend's
`database`.

Invariants every implementation keeps:

- A run's frame ids are its own sequence 1..n with no gap, unique per
  `(run_id, id)`; a reader never sees a frame that is not durable.
- An append is a transaction: the frames queued so far, then the record changes
  queued after them, commit together or not at all (a backend may fence it with
  the run's owner and lease epoch). When a run's writes are given up the log says
  so (`is_lost`, `on_lost`, `flush` raising `StoreError`) and the executor ends
  the run from its first lost id (`reopen`).
- Committed frames are published to `LiveFrames` after the commit, never before.
- Routes and the run engine see these protocols and the errors below, never a
  database driver or its exceptions; the backend-neutral modules of the engine
  import no backend.

How the PostgreSQL backend (`engine/postgres/`) fits: the event log's table is
keyed `(run_id, seq)`; the executor holding the run numbers its frames from the
log's `last_id + 1` (as a resumed execution does) and the key refuses a duplicate.
Each append's transaction first renews the run's lease where its owner and epoch
still match (the log is told the lease with `hold`) and writes nothing when they do
not; it publishes to `LiveFrames` (Redis) after the commit. Claiming a pending run
for execution (`SELECT … FOR UPDATE SKIP LOCKED`) is an operation of that backend's
`RunRepository`, used by its workers; the in-process executor needs none, as the
process that inserts a run starts it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from engine.assistants import Assistant
from engine.quotas import Limits
from engine.ranking import StoreReader
from engine.records import (
    CancelAction,
    Frame,
    RecordChange,
    RunRecord,
    RunStatus,
    ThreadRecord,
    ThreadStatus,
    ThreadTTL,
)
from engine.tracing import RunTracing
from engine.usage import QuotaRepository, RunMeter
from engine.webhooks import DeliveryStore, WebhookConfig

#: Called with a run id and every committed batch of its frames, in id order.
Publish = Callable[[str, list[Frame]], None]


class StoreError(RuntimeError):
    """The event log could not be written (the run's frames since its last commit are lost)."""


class StorageUnavailable(RuntimeError):
    """The database takes no writes now (locked past its timeout, full); nothing was written."""


class ThreadExists(RuntimeError):
    """A thread with this id exists already (for some owner)."""


class ThreadRepository(Protocol):
    """Threads, each owned by one API key."""

    async def get(self, owner: str, thread_id: str) -> ThreadRecord | None:
        """Return the owner's thread, or None (also when another owner has it)."""
        ...

    async def exists(self, thread_id: str) -> bool:
        """Return whether any owner has a thread with this id."""
        ...

    async def insert(self, thread: ThreadRecord) -> None:
        """Store a new thread; raise `ThreadExists` when the id is taken."""
        ...

    async def merge_metadata(
        self, owner: str, thread_id: str, metadata: dict[str, Any], ttl: ThreadTTL | None = None
    ) -> ThreadRecord | None:
        """Merge keys into the owner's thread's metadata atomically; return the thread.

        Concurrent merges into one thread all land (one statement, or the read and the
        write under the database's write lock). None when the owner has no such thread.
        With `ttl`, the thread's TTL is replaced too (`engine.retention`).
        """
        ...

    async def search(
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
        """Return the owner's threads matching every given filter (limit -1: all)."""
        ...

    async def count(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
    ) -> int:
        """Return how many of the owner's threads match every given filter (counted in SQL)."""
        ...

    async def delete(self, thread_id: str) -> None:
        """Delete a thread with its runs and their event logs (not its checkpoints)."""
        ...


class RunRepository(Protocol):
    """Runs, each on one thread; at most the runs of one thread's queue are active."""

    async def insert(
        self,
        run: RunRecord,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool,
        limits: Limits | None = None,
    ) -> bool:
        """Store a pending run (and the thread it creates) in one transaction.

        With `exclusive`, store it only if its thread has no pending or running
        run, checked atomically with the insert; return False when it had one.
        With `limits`, the owner's runs and spend are counted in that transaction,
        taking turns with every other process's inserts of the owner
        (`engine.quotas`). Raises `StorageUnavailable` when nothing could be
        written, `ThreadExists` when `new_thread`'s id is taken, `QuotaExceeded`
        when the run would go over a limit.
        """
        ...

    async def get(self, run_id: str) -> RunRecord | None:
        """Return a run by id."""
        ...

    async def find(self, owner: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run on a thread, or None."""
        ...

    async def find_idempotent(self, owner: str, key: str) -> RunRecord | None:
        """Return the owner's run created with an `Idempotency-Key`, or None."""
        ...

    async def for_thread(
        self, thread_id: str, *, limit: int = 10, offset: int = 0, status: RunStatus | None = None
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first."""
        ...

    async def active(self, thread_id: str | None = None) -> list[RunRecord]:
        """Return pending and running runs (of one thread, or all), oldest first."""
        ...

    async def delete(self, run_id: str) -> None:
        """Delete a run record and its event log."""
        ...


class EventLog(Protocol):
    """Each run's frames, appended by the run's executor and read by its followers."""

    #: Called with a run id when the run's queued writes are given up (once per loss).
    on_lost: Callable[[str], None] | None

    def append(self, run_id: str, frame: Frame) -> None:
        """Queue a frame of the run; it is committed, then published, shortly."""
        ...

    def record(self, change: RecordChange, *, run_id: str | None = None) -> None:
        """Queue a run-status or thread-state change to commit after the frames queued so far.

        Args:
            change: The change.
            run_id: The run whose frames it follows (a lost run's changes are dropped
                with its frames); None for a change of no run.
        """
        ...

    async def flush(self, run_id: str | None = None) -> None:
        """Wait until everything queued so far is committed (or given up).

        Raises:
            StoreError: `run_id`'s writes were given up (see `reopen`).
        """
        ...

    def is_lost(self, run_id: str) -> bool:
        """Whether the run's queued writes were given up (and it was not reopened since)."""
        ...

    def reopen(self, run_id: str) -> int | None:
        """Accept a lost run's writes again; return its first frame id that is not durable.

        What the run queued before is dropped unwritten; None when it was not lost.
        """
        ...

    async def read(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        ...

    async def last_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        ...

    async def prune(self, finished_before: str) -> int:
        """Drop the logs of runs finished before a time but their final frames; return how many."""
        ...


class Subscription(Protocol):
    """One follower's feed of a run's committed frames."""

    run_id: str
    #: Frames were dropped (a slow follower): re-read the log after the last id sent.
    lagged: bool

    async def next_batch(self, wait: float) -> list[Frame] | None:
        """Return the frames fed so far (empty: lagged or poked), or None after `wait` s."""
        ...

    def caught_up(self) -> None:
        """Resume live delivery after the follower re-read the log."""
        ...


class LiveFrames(Protocol):
    """Live fan-out of committed frames, and which runs are being executed."""

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run; frames published from now on are fed to the subscription."""
        ...

    def unsubscribe(self, sub: Any) -> None:
        """Stop following; idempotent."""
        ...

    def publish(self, run_id: str, frames: list[Frame]) -> None:
        """Feed committed frames to every follower of the run."""
        ...

    def is_live(self, run_id: str) -> bool:
        """Whether the run is being executed (its followers may wait for more frames)."""
        ...

    def run_live(self, run_id: str) -> None:
        """Note that this process executes the run from now on."""
        ...

    def run_gone(self, run_id: str) -> None:
        """Note that this process stopped executing the run, and wake its followers."""
        ...


class RunStorage(Protocol):
    """One backend's three repositories, opened and closed together."""

    @property
    def threads(self) -> ThreadRepository:
        """The threads."""
        ...

    @property
    def runs(self) -> RunRepository:
        """The runs."""
        ...

    @property
    def events(self) -> EventLog:
        """The runs' event logs."""
        ...

    @property
    def deliveries(self) -> DeliveryStore:
        """The webhook outbox (`engine.webhooks`)."""
        ...

    async def ping(self) -> None:
        """Run a query (readiness); raise when the database cannot answer."""
        ...


class RunMetrics(Protocol):
    """What an executor reports (implemented by `app.metrics.AtelierMetrics`)."""

    def run_started(self) -> None: ...
    def run_finished(self, status: str, seconds: float) -> None: ...
    def run_left(self) -> None: ...
    def observe_event(self, event: Any) -> None: ...


@dataclass(frozen=True)
class ExecutorSetup:
    """What every executor executes runs with, besides its backend's parts."""

    #: The graphs served, by assistant id.
    assistants: dict[str, Assistant]
    #: What graph runs get as `context=` (the product's runtime context; opaque here).
    context: Any
    #: RUN_TIMEOUT: seconds a run's graph may take.
    run_timeout: float
    metrics: RunMetrics | None = None
    #: LangChain callbacks every run's config carries (LLM metrics).
    callbacks: Sequence[BaseCallbackHandler] = ()
    #: The webhook rules and delivery settings (a run's `webhook` is checked at creation).
    webhooks: WebhookConfig = field(default_factory=WebhookConfig)
    #: OpenTelemetry tracing of runs (`engine.tracing`); None: runs are not traced.
    tracing: RunTracing | None = None
    #: Errors whose messages a failed run's `error` frame shows (`engine.frames.public_error`).
    public_errors: tuple[type[BaseException], ...] = ()
    #: Measures each run's LLM usage, recorded when it ends (`engine.usage`); None: none.
    meter: RunMeter | None = None


class RunExecutor(Protocol):
    """Executes runs (or has them executed) and answers for them while they run."""

    def start(self, run: RunRecord, *, after: Sequence[str] = (), next_id: int = 1) -> None:
        """Start executing a run (after the runs `after`), its first frame numbered `next_id`."""
        ...

    def is_active(self, run_id: str) -> bool:
        """Whether this executor is executing the run (or has it queued)."""
        ...

    def active_on(self, thread_id: str) -> list[str]:
        """Return the ids of the runs of a thread this executor is executing."""
        ...

    def cancel(self, run_id: str, reason: CancelAction) -> None:
        """Ask a run to stop (no-op when this executor does not execute it)."""
        ...

    async def cancel_all(self, run_ids: Sequence[str], action: CancelAction) -> None:
        """Cancel runs and wait until each has stopped."""
        ...

    async def wait(self, run_id: str) -> None:
        """Wait until the executor stops executing the run (at once if it does not)."""
        ...

    def ended(self, run_id: str) -> tuple[RunRecord, dict[str, Any]] | None:
        """Return the record and result of a run deleted as it ended, if still known."""
        ...

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it)."""
        ...

    async def abandon(self, run: RunRecord, next_id: int) -> None:
        """End a run that used up its attempts with `error` and `end` frames."""
        ...

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        ...


class CheckpointHousekeeping(Protocol):
    """Writes to LangGraph's checkpoint tables beyond the saver's API, for one backend.

    A run's checkpoints are the thread's checkpoints whose metadata names the run
    (the executor puts `run_id` into `config["metadata"]`, which LangGraph copies
    into every checkpoint, subgraphs' too).
    """

    async def settle(self) -> bool:
        """Commit a write a cancelled checkpoint write left open; return whether one was."""
        ...

    async def delete_run(self, thread_id: str, run_id: str) -> int | None:
        """Delete the checkpoints a run wrote (a rollback); return how many, None: unknown."""
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint (subgraphs' too) and pending write of a thread."""
        ...

    async def copy_thread(self, source: str, target: str) -> None:
        """Copy every checkpoint (subgraphs' too) and pending write of a thread to another."""
        ...

    async def keep_latest(self, thread_id: str) -> None:
        """Delete a thread's checkpoints but the latest of each namespace (its state stays)."""
        ...


@dataclass(frozen=True)
class DatabasePools:
    """The scale-out backend's connection pools, shared with the product's own stores.

    The product's stores (its knowledge notes, its assets) live in the same database
    (their tables are in `engine.postgres.migrations`); its opener builds them on these.
    """

    #: The process's async psycopg pool.
    pool: Any
    #: A psycopg pool for blocking callers (worker threads).
    sync_pool: Any


class RunBackend(Protocol):
    """One deployment's run engine parts, opened and closed together.

    `engine.sqlite.backend.open_sqlite_backend` (embedded: one file, runs executed
    in this process) and `engine.postgres.backend.open_postgres_backend` (scale-out:
    the shared queue, executed by workers) open one as an async context manager.
    """

    @property
    def storage(self) -> RunStorage:
        """Threads, runs and event logs."""
        ...

    @property
    def live(self) -> LiveFrames:
        """The live fan-out of committed frames."""
        ...

    @property
    def checkpointer(self) -> BaseCheckpointSaver:
        """LangGraph's saver, which the graphs are compiled with."""
        ...

    @property
    def checkpoints(self) -> CheckpointHousekeeping:
        """The saver's housekeeping."""
        ...

    @property
    def store(self) -> BaseStore:
        """LangGraph's store of the deployment, unscoped (`engine.store.ScopedStore` scopes it)."""
        ...

    @property
    def pools(self) -> DatabasePools | None:
        """The database pools the product's own stores may share (None: embedded)."""
        ...

    @property
    def recovers_runs(self) -> bool:
        """Whether this process recovers the runs left without an outcome (else workers do)."""
        ...

    @property
    def ready_checks(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """Readiness checks by name (each raises when its server fails), the storage's too."""
        ...

    @property
    def queue_depth(self) -> Callable[[], Awaitable[int]] | None:
        """Reads how many runs wait in a shared queue (None: there is none)."""
        ...

    @property
    def kind(self) -> Literal["sqlite", "postgres"]:
        """Which backend this is: what the resources' repositories are built for."""
        ...

    @property
    def database(self) -> Any:
        """What the resources' repositories are built on (`engine.opener`): the SQLite
        database (`engine.sqlite.database.SqliteDatabase`), or the async pool."""
        ...

    @property
    def store_reader(self) -> StoreReader:
        """Reads `store` off the event loop, for ranked searches (`engine.ranking`)."""
        ...

    @property
    def quotas(self) -> QuotaRepository:
        """Usage reports, and the Store's byte and search accounting (`engine.usage`)."""
        ...

    def executor(self, setup: ExecutorSetup) -> RunExecutor:
        """Return the executor the engine hands its runs to."""
        ...

    def workers(
        self, setup: ExecutorSetup, *, count: int | None = None, concurrency: int | None = None
    ) -> AbstractAsyncContextManager[Sequence[object]]:
        """Run this process's workers and webhook deliverer for the block; yield the workers.

        It yields none where the executor runs every run itself (embedded).

        Args:
            setup: What they execute runs with.
            count: How many workers (default RUN_WORKERS; ignored where there are none).
            concurrency: Runs each executes at once at most (default RUN_WORKER_CONCURRENCY).
        """
        ...


# -- what the runs service offers a stream response -----------------------------------


class RunFrames(Protocol):
    """What a stream response follows: a run's committed frames, from its log and live.

    The runs service (`engine.services.runs.RunsService`) offers it over its event log
    and live fan-out, so `engine.follow.follow_frames` reaches neither.
    """

    async def read_frames(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        ...

    async def last_frame_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        ...

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run; frames committed from now on are fed to the subscription."""
        ...

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; idempotent."""
        ...

    def is_live(self, run_id: str) -> bool:
        """Whether the run is being executed (its followers may wait for more frames)."""
        ...
