"""Durable threads, runs and event logs in the service's SQLite database.

Everything lives in `DATA_DIR/atelier.db` (WAL mode), next to the knowledge notes
and LangGraph's checkpoints (`AsyncSqliteSaver` on the same file), so one file
holds a deployment's state and a rollback can drop a run's checkpoints in the
same database.

Connections: one *writer* connection, used only for writes, in explicit
`BEGIN IMMEDIATE … COMMIT` transactions under one lock, and one *reader*
connection (`query_only`) for every read. Keeping reads off the writer is what
makes the busy timeout work: SQLite calls the busy handler only when a
connection starts a write with no read transaction open. A connection that
still has a read statement in flight (a half-iterated cursor, or an `execute`
whose `fetch` has not run yet) and then runs `BEGIN IMMEDIATE` gets
`database is locked` *at once* while any other connection holds the write lock
(the checkpointer commits a checkpoint every step), and at once too when its
read snapshot is older than the last commit (`SQLITE_BUSY_SNAPSHOT`). With one
shared connection that happened under load to about one run in six; with the
split the writer never holds a read, so it waits its turn (busy timeout) like
every other writer of the file, and readers never see an uncommitted frame.
The other writers of `atelier.db` (LangGraph's `AsyncSqliteSaver`, the notes
repository) follow the same rule: a busy timeout, and a write transaction that
starts with a write, never a read that upgrades.

Event frames are group-committed: `append` queues a frame and returns at once; a
writer task commits everything queued so far in one transaction and only then
hands the frames to `publish` (the live fan-out), so a subscriber never sees a
frame that a crash could take back, and a rejoin after a restart continues with
the next durable id. A batch that fails is retried with backoff (a locked or
full database often comes back); one that still fails is split by run, so only
the runs whose own writes fail are *lost*: their queued frames are dropped (never
half-written, never published), `flush(run_id)` raises `StoreError`, and the
`on_lost` callback tells the run manager, which ends the run loudly from its
first lost frame id (`reopen`) or leaves it for recovery. Nothing is counted
committed that was not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

import aiosqlite

from app.runs.serde import dumps, loads

log = logging.getLogger(__name__)

#: Statuses of a run (the LangGraph Platform set).
RUN_STATUSES = ("pending", "running", "success", "error", "timeout", "interrupted")
#: Statuses of a run that still owns its thread.
ACTIVE_STATUSES = ("pending", "running")
#: Frames a pruned event log keeps, so a late rejoin still ends the way the run did.
KEPT_AFTER_PRUNING = ("error", "end")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id   TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL DEFAULT 'idle',
    state       TEXT,                       -- values after the last run, JSON
    interrupts  TEXT NOT NULL DEFAULT '{}'  -- pending interrupts by task id, JSON
);
CREATE INDEX IF NOT EXISTS threads_owner ON threads (owner, created_at);

CREATE TABLE IF NOT EXISTS runs (
    run_id              TEXT PRIMARY KEY,
    thread_id           TEXT NOT NULL,
    owner               TEXT NOT NULL,
    assistant_id        TEXT NOT NULL,
    status              TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    finished_at         TEXT,
    metadata            TEXT NOT NULL DEFAULT '{}',
    kwargs              TEXT NOT NULL,      -- input, command, stream options, config
    multitask_strategy  TEXT NOT NULL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    cancel_reason       TEXT,
    error               TEXT,               -- {"error", "message"} of a failed run, JSON
    idempotency_key     TEXT,
    request_hash        TEXT,
    events_pruned       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_thread ON runs (thread_id, created_at);
CREATE INDEX IF NOT EXISTS runs_active ON runs (status) WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE events_pruned = 0;
CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency
    ON runs (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS run_events (
    run_id  TEXT NOT NULL,  -- no foreign key: a late frame of a deleted run is harmless
    id      INTEGER NOT NULL,
    event   TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
"""


def now() -> str:
    """Return the current UTC time as an ISO 8601 string (sortable as text)."""
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame of a run's stream: `id:`, `event:` and JSON `data:`."""

    id: int
    event: str  # e.g. "metadata", "custom", "updates|executor:<task id>", "end"
    data: str  # compact JSON text, one line

    @property
    def mode(self) -> str:
        """The stream mode the frame belongs to (the event name without its namespace)."""
        return self.event.split("|", 1)[0]

    def encode(self) -> bytes:
        """Return the frame as SSE bytes."""
        return f"id: {self.id}\nevent: {self.event}\ndata: {self.data}\n\n".encode()


@dataclass(slots=True)
class ThreadRecord:
    """A thread: a checkpointed conversation owned by one API key."""

    thread_id: str
    owner: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    status: str = "idle"  # idle | busy | interrupted | error
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the thread in the LangGraph Platform shape."""
        return {
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
            "status": self.status,
            "values": self.values,
            "interrupts": self.interrupts,
        }


@dataclass(slots=True)
class RunRecord:
    """A run: one execution of an assistant on a thread."""

    run_id: str
    thread_id: str
    owner: str
    assistant_id: str
    status: str
    created_at: str
    updated_at: str
    kwargs: dict[str, Any]
    multitask_strategy: str
    metadata: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    finished_at: str | None = None
    cancel_reason: str | None = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None

    @property
    def active(self) -> bool:
        """Whether the run is pending or running."""
        return self.status in ACTIVE_STATUSES

    def to_json(self) -> dict[str, Any]:
        """Return the run in the LangGraph Platform shape."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "status": self.status,
            "metadata": self.metadata,
            "kwargs": self.kwargs,
            "multitask_strategy": self.multitask_strategy,
            "attempt": self.attempt,
            "cancel_reason": self.cancel_reason,
            "error": self.error,
        }


def _thread(row: sqlite3.Row) -> ThreadRecord:
    return ThreadRecord(
        thread_id=row["thread_id"],
        owner=row["owner"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        metadata=loads(row["metadata"]) or {},
        status=row["status"],
        values=loads(row["state"]),
        interrupts=loads(row["interrupts"]) or {},
    )


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        metadata=loads(row["metadata"]) or {},
        kwargs=loads(row["kwargs"]) or {},
        multitask_strategy=row["multitask_strategy"],
        attempt=row["attempt"],
        cancel_reason=row["cancel_reason"],
        error=loads(row["error"]),
        idempotency_key=row["idempotency_key"],
        request_hash=row["request_hash"],
    )


Publish = Callable[[str, list[Frame]], None]
Statement = tuple[str, Sequence[Any]]

#: Seconds a connection waits for another connection's write lock (SQLite busy timeout).
BUSY_TIMEOUT = 5.0
#: Seconds the event writer keeps retrying a batch that fails before giving its runs up.
RETRY_FOR = 10.0


_INSERT_FRAME = "INSERT INTO run_events (run_id, id, event, data) VALUES (?, ?, ?, ?)"


class StoreError(RuntimeError):
    """The event log could not be written (the run's frames since its last commit are lost)."""


@dataclass(frozen=True, slots=True)
class _Item:
    """One queued write: a frame or a statement, of a run (None: of no run)."""

    run_id: str | None
    generation: int
    frame: Frame | None = None
    statement: Statement | None = None


class RunStore:
    """Threads, runs and event logs in SQLite, with group-committed event appends.

    Use as an async context manager (or `open()`/`close()`); `publish(run_id,
    frames)` is called with every committed batch of a run's frames, in id order.
    """

    def __init__(
        self,
        path: str,
        publish: Publish | None = None,
        *,
        busy_timeout: float = BUSY_TIMEOUT,
        retry_for: float = RETRY_FOR,
    ) -> None:
        """Bind the store to a database file; nothing is opened yet.

        Args:
            path: The SQLite file.
            publish: Called with every committed batch of a run's frames.
            busy_timeout: Seconds a write waits for another connection's lock.
            retry_for: Seconds the event writer retries a failing batch before the
                runs it carries are lost.
        """
        self.path = path
        self._publish = publish or (lambda _run_id, _frames: None)
        self.busy_timeout = busy_timeout
        self.retry_for = retry_for
        #: Called with a run id when the run's queued writes are lost (see `reopen`).
        self.on_lost: Callable[[str], None] | None = None
        self._conn: aiosqlite.Connection | None = None  # the writer
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._pending: list[_Item] = []
        self._queued = 0  # items queued since open
        self._resolved = 0  # of those, how many are committed or given up
        self._lost: dict[str, int | None] = {}  # run → its first frame id not durable (if any)
        self._generation: dict[str, int] = {}  # run → bumped by `reopen`
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def _connect(self, *, query_only: bool) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            if query_only:
                await conn.execute("PRAGMA query_only=1")
            else:
                await conn.execute("PRAGMA journal_mode=WAL")
                await conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
        except BaseException:
            await conn.close()
            raise
        return conn

    async def open(self) -> Self:
        """Connect (a writer and a reader), create the tables and start the event writer."""
        conn = await self._connect(query_only=False)
        try:
            async with self._write_lock:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    await conn.executescript(_SCHEMA)  # commits
                except BaseException:
                    if conn.in_transaction:
                        await conn.execute("ROLLBACK")
                    raise
            self._reader = await self._connect(query_only=True)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._writer = asyncio.create_task(self._write_loop(), name="run-events-writer")
        return self

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the connections; idempotent."""
        if self._conn is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.busy_timeout + self.retry_for + 1):
                await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        await self._conn.close()
        self._conn = None
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Run a query on the store's reader connection (readiness)."""
        await self._read("SELECT count(*) FROM runs WHERE status = 'running'")

    @property
    def _db(self) -> aiosqlite.Connection:
        """The writer connection (writes only, inside `transaction`)."""
        if self._conn is None:
            raise RuntimeError("RunStore is not open")
        return self._conn

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run a query on the reader and return all its rows (one hop to its thread).

        The statement is stepped to its end and reset in one call, so the reader
        never keeps a snapshot open between awaits.
        """
        if self._reader is None:
            raise RuntimeError("RunStore is not open")
        return list(await self._reader.execute_fetchall(sql, params))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Run statements in one write transaction (BEGIN IMMEDIATE … COMMIT) on the writer.

        The writer holds no read when it begins, so `BEGIN IMMEDIATE` waits up to the
        busy timeout for the lock instead of failing at once. A failed COMMIT (a full
        disk) is rolled back, so the connection is never left inside a transaction.
        """
        async with self._write_lock:
            db = self._db
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                await db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        await db.execute("ROLLBACK")
                raise

    # -- event log -----------------------------------------------------------------

    def append(self, run_id: str, frame: Frame) -> None:
        """Queue a frame for the run's log; it is committed, then published, shortly."""
        self._queue(_Item(run_id, self._generation.get(run_id, 0), frame=frame))

    def queue_statement(
        self, sql: str, params: Sequence[Any], *, run_id: str | None = None
    ) -> None:
        """Queue a statement to commit with the next batch of frames (after them).

        Args:
            sql: The statement.
            params: Its parameters.
            run_id: The run it records (its fate follows the run's frames: a lost run's
                statement is dropped with them); None for a statement of no run.
        """
        generation = self._generation.get(run_id, 0) if run_id is not None else 0
        self._queue(_Item(run_id, generation, statement=(sql, params)))

    def _queue(self, item: _Item) -> None:
        self._pending.append(item)
        self._queued += 1
        self._wake.set()

    async def flush(self, run_id: str | None = None) -> None:
        """Wait until everything queued so far is committed (or given up).

        Args:
            run_id: Raise `StoreError` if this run's writes were lost (see `reopen`).
        """
        target = self._queued
        if self._resolved < target:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((target, future))
            await future
        if run_id is not None and run_id in self._lost:
            raise StoreError(f"the event log of run {run_id} could not be written")

    def is_lost(self, run_id: str) -> bool:
        """Whether the run's queued writes were given up (and it was not reopened since)."""
        return run_id in self._lost

    def reopen(self, run_id: str) -> int | None:
        """Accept a lost run's writes again; return its first frame id that is not durable.

        Everything the run queued before this call is dropped unwritten (those frames
        were never published), so the run's log holds exactly its frames below the
        returned id and the caller continues from there without a gap.

        Returns:
            The first lost frame id, or None when the run was not lost.
        """
        if run_id not in self._lost:
            return None
        self._generation[run_id] = self._generation.get(run_id, 0) + 1
        return self._lost.pop(run_id)

    def _live(self, item: _Item) -> bool:
        """Whether a queued item is still to be written (its run was not lost since).

        A dropped frame of a run that is lost now counts towards its first lost id.
        """
        run_id = item.run_id
        if run_id is None:
            return True
        if item.generation != self._generation.get(run_id, 0):
            return False  # queued before `reopen`: the run continues from its first lost id
        if run_id not in self._lost:
            return True
        self._note_lost(run_id, item)
        return False

    def _note_lost(self, run_id: str, item: _Item) -> None:
        if item.frame is not None:
            first = self._lost.get(run_id)
            self._lost[run_id] = item.frame.id if first is None else min(first, item.frame.id)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            try:
                await self._write_batch(batch)
            except Exception:  # a bug here must not stop the log: give the batch up loudly
                log.exception("the event writer failed on a batch of %d write(s)", len(batch))
                for run_id in {item.run_id for item in batch if item.run_id is not None}:
                    self._lose(run_id, [i for i in batch if i.run_id == run_id])
            self._resolved += len(batch)
            self._wake_waiters()

    async def _write_batch(self, batch: list[_Item]) -> None:
        """Commit a batch (retrying), or split it by run and give up the runs that fail."""
        items = [item for item in batch if self._live(item)]
        if not items:
            return
        error = await self._commit_retrying(items)
        if error is None:
            self._publish_items(items)
            return
        groups: dict[str | None, list[_Item]] = {}
        for item in items:
            groups.setdefault(item.run_id, []).append(item)
        if len(groups) == 1:
            run_id, failed = next(iter(groups.items()))
            self._give_up(run_id, failed, error)
            return
        for run_id, group in groups.items():  # one run's bad write must not sink the others
            group_error = await self._commit_once(group)
            if group_error is None:
                self._publish_items(group)
            else:
                self._give_up(run_id, group, group_error)

    async def _commit_retrying(self, items: list[_Item]) -> BaseException | None:
        """Commit items in one transaction, retrying with backoff for `retry_for` seconds."""
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            error = await self._commit_once(items)
            if error is None:
                return None
            if not isinstance(error, sqlite3.OperationalError) or time.monotonic() >= deadline:
                return error  # locked/full/IO errors may pass; a constraint never does
            log.warning("committing %d run write(s) failed (%s); retrying", len(items), error)
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    async def _commit_once(self, items: list[_Item]) -> BaseException | None:
        try:
            await self._commit(items)
        except Exception as exc:  # locked, full, read-only, I/O: the caller decides
            return exc
        return None

    async def _commit(self, items: list[_Item]) -> None:
        """Write items in one transaction."""
        async with self.transaction() as db:
            await self._write_items(db, items)

    @staticmethod
    async def _write_items(db: aiosqlite.Connection, items: list[_Item]) -> None:
        """Write items in queue order (a run's frames before the statements queued after)."""
        rows: list[tuple[str, int, str, str]] = []
        for item in items:
            if item.frame is not None:
                assert item.run_id is not None
                rows.append((item.run_id, item.frame.id, item.frame.event, item.frame.data))
                continue
            if rows:
                await db.executemany(_INSERT_FRAME, rows)
                rows = []
            assert item.statement is not None
            await db.execute(*item.statement)
        if rows:
            await db.executemany(_INSERT_FRAME, rows)

    def _give_up(self, run_id: str | None, items: list[_Item], error: BaseException) -> None:
        if run_id is None:
            log.error("a statement of no run could not be committed: %s", error)
            return
        log.error(
            "the event log of run %s could not be written (%d write(s) given up): %s",
            run_id,
            len(items),
            error,
        )
        self._lose(run_id, items)

    def _lose(self, run_id: str, items: list[_Item]) -> None:
        known = run_id in self._lost
        self._lost.setdefault(run_id, None)
        for item in items:
            self._note_lost(run_id, item)
        if known:
            return
        if self.on_lost is not None:
            try:
                self.on_lost(run_id)
            except Exception:
                log.exception("on_lost failed for run %s", run_id)

    def _publish_items(self, items: list[_Item]) -> None:
        by_run: dict[str, list[Frame]] = {}
        for item in items:
            if item.frame is not None and item.run_id is not None:
                by_run.setdefault(item.run_id, []).append(item.frame)
        for run_id, batch in by_run.items():
            try:
                self._publish(run_id, batch)
            except Exception:  # a subscriber's bug must not stop the log
                log.exception("publishing frames of run %s failed", run_id)

    def _wake_waiters(self) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, future in self._waiters:
            if future.done():
                continue
            if target > self._resolved:
                still.append((target, future))
            else:
                future.set_result(None)
        self._waiters = still

    async def read_events(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        rows = await self._read(
            "SELECT id, event, data FROM run_events WHERE run_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (run_id, after, limit),
        )
        return [Frame(row[0], row[1], row[2]) for row in rows]

    async def last_event_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        rows = await self._read(
            "SELECT COALESCE(MAX(id), 0) FROM run_events WHERE run_id = ?", (run_id,)
        )
        return int(rows[0][0]) if rows else 0

    async def prune_events(self, finished_before: str) -> int:
        """Drop the logs of runs finished before a time, keeping their final frames.

        Returns:
            The number of runs whose logs were pruned.
        """
        kept = ", ".join(f"'{event}'" for event in KEPT_AFTER_PRUNING)
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT run_id FROM runs WHERE events_pruned = 0 AND finished_at IS NOT NULL "
                "AND finished_at < ?",
                (finished_before,),
            )
            run_ids = [row[0] for row in await cursor.fetchall()]
            for run_id in run_ids:
                await db.execute(
                    f"DELETE FROM run_events WHERE run_id = ? AND event NOT IN ({kept})",
                    (run_id,),
                )
                await db.execute("UPDATE runs SET events_pruned = 1 WHERE run_id = ?", (run_id,))
        return len(run_ids)

    # -- threads -------------------------------------------------------------------

    async def get_thread(self, owner: str, thread_id: str) -> ThreadRecord | None:
        """Return the owner's thread, or None (also when another owner has it)."""
        rows = await self._read(
            "SELECT * FROM threads WHERE thread_id = ? AND owner = ?", (thread_id, owner)
        )
        return _thread(rows[0]) if rows else None

    async def thread_exists(self, thread_id: str) -> bool:
        """Return whether any owner has a thread with this id."""
        return bool(await self._read("SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,)))

    async def insert_thread(self, thread: ThreadRecord) -> None:
        """Store a new thread (raises `aiosqlite.IntegrityError` when the id is taken)."""
        async with self.transaction() as db:
            await self._insert_thread(db, thread)

    @staticmethod
    async def _insert_thread(db: aiosqlite.Connection, thread: ThreadRecord) -> None:
        await db.execute(
            "INSERT INTO threads (thread_id, owner, created_at, updated_at, metadata, status, "
            "state, interrupts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                thread.thread_id,
                thread.owner,
                thread.created_at,
                thread.updated_at,
                dumps(thread.metadata),
                thread.status,
                None if thread.values is None else dumps(thread.values),
                dumps(thread.interrupts),
            ),
        )

    async def update_thread_metadata(self, thread_id: str, metadata: dict[str, Any]) -> None:
        """Replace a thread's metadata."""
        async with self.transaction() as db:
            await db.execute(
                "UPDATE threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
                (dumps(metadata), now(), thread_id),
            )

    @staticmethod
    def thread_state_statement(
        thread_id: str,
        status: str,
        values: dict[str, Any] | None = None,
        interrupts: dict[str, Any] | None = None,
    ) -> Statement:
        """Return the statement that records a thread's status (and state, when given)."""
        if values is None:
            return (
                "UPDATE threads SET status = ?, updated_at = ? WHERE thread_id = ?",
                (status, now(), thread_id),
            )
        return (
            "UPDATE threads SET status = ?, state = ?, interrupts = ?, updated_at = ? "
            "WHERE thread_id = ?",
            (status, dumps(values), dumps(interrupts or {}), now(), thread_id),
        )

    async def execute(self, statements: Iterable[Statement]) -> None:
        """Run statements in one transaction."""
        async with self.transaction() as db:
            for sql, params in statements:
                await db.execute(sql, params)

    async def search_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: str | None = None,
        ids: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[ThreadRecord]:
        """Return the owner's threads matching every given filter."""
        where = ["owner = ?"]
        params: list[Any] = [owner]
        for key, value in (metadata or {}).items():
            where.append("json_extract(metadata, ?) IS json_extract(?, '$')")
            params += [f'$."{key}"', dumps(value)]
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if ids is not None:
            where.append(f"thread_id IN ({', '.join('?' for _ in ids)})")
            params += list(ids)
        column = {"thread_id": "thread_id", "status": "status", "updated_at": "updated_at"}.get(
            sort_by, "created_at"
        )
        order = "ASC" if sort_order == "asc" else "DESC"
        sql = (
            f"SELECT * FROM threads WHERE {' AND '.join(where)} "
            f"ORDER BY {column} {order}, rowid {order} LIMIT ? OFFSET ?"
        )
        return [_thread(row) for row in await self._read(sql, [*params, limit, offset])]

    async def delete_thread(self, thread_id: str) -> None:
        """Delete a thread with its runs and their event logs (checkpoints are the saver's)."""
        async with self.transaction() as db:
            await db.execute(
                "DELETE FROM run_events WHERE run_id IN "
                "(SELECT run_id FROM runs WHERE thread_id = ?)",
                (thread_id,),
            )
            await db.execute("DELETE FROM runs WHERE thread_id = ?", (thread_id,))
            await db.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,))

    async def delete_run_checkpoints(self, thread_id: str, run_id: str) -> int:
        """Delete the checkpoints (and their pending writes) a run created; return how many.

        LangGraph copies `config["metadata"]` into every checkpoint's metadata, and the
        run manager puts the run id there, so a run's checkpoints (subgraphs' too) are
        the thread's checkpoints whose metadata names the run.
        """
        match = "thread_id = ? AND json_extract(CAST(metadata AS TEXT), '$.run_id') = ?"
        async with self.transaction() as db:
            try:
                await db.execute(
                    "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id IN "
                    f"(SELECT checkpoint_id FROM checkpoints WHERE {match})",
                    (thread_id, thread_id, run_id),
                )
                cursor = await db.execute(
                    f"DELETE FROM checkpoints WHERE {match}", (thread_id, run_id)
                )
            except aiosqlite.OperationalError:  # the checkpointer has not created its tables
                return 0
            return cursor.rowcount

    # -- runs ----------------------------------------------------------------------

    @staticmethod
    def _run_params(run: RunRecord) -> tuple[Any, ...]:
        return (
            run.run_id,
            run.thread_id,
            run.owner,
            run.assistant_id,
            run.status,
            run.created_at,
            run.updated_at,
            dumps(run.metadata),
            dumps(run.kwargs),
            run.multitask_strategy,
            run.attempt,
            run.idempotency_key,
            run.request_hash,
        )

    async def insert_run(
        self, run: RunRecord, *, new_thread: ThreadRecord | None = None, exclusive: bool
    ) -> bool:
        """Store a run (and the thread it creates) in one transaction.

        Args:
            run: The run, status `pending`.
            new_thread: A thread to create with the run, or None to use an existing one.
            exclusive: Store the run only if its thread has no pending or running run;
                the check and the insert are one statement, so two racing requests
                cannot both pass it.

        Returns:
            False when `exclusive` and the thread was busy (nothing is written).
        """
        columns = (
            "run_id, thread_id, owner, assistant_id, status, created_at, updated_at, metadata, "
            "kwargs, multitask_strategy, attempt, idempotency_key, request_hash"
        )
        values = ", ".join("?" for _ in range(13))
        async with self.transaction() as db:
            if new_thread is not None:
                await self._insert_thread(db, new_thread)
            if exclusive:
                cursor = await db.execute(
                    f"INSERT INTO runs ({columns}) SELECT {values} WHERE NOT EXISTS "
                    "(SELECT 1 FROM runs WHERE thread_id = ? AND status IN ('pending', 'running'))",
                    (*self._run_params(run), run.thread_id),
                )
                if cursor.rowcount != 1:
                    return False
            else:
                await db.execute(
                    f"INSERT INTO runs ({columns}) VALUES ({values})", self._run_params(run)
                )
            # Like LangGraph Platform, a thread learns the graph that first ran on it.
            await db.execute(
                "UPDATE threads SET status = 'busy', updated_at = ?, metadata = CASE "
                "WHEN json_extract(metadata, '$.graph_id') IS NULL "
                "THEN json_set(metadata, '$.graph_id', ?, '$.assistant_id', ?) "
                "ELSE metadata END WHERE thread_id = ?",
                (now(), run.assistant_id, run.assistant_id, run.thread_id),
            )
        return True

    async def get_run(self, run_id: str) -> RunRecord | None:
        """Return a run by id."""
        rows = await self._read("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    async def find_run(self, owner: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run on a thread, or None."""
        run = await self.get_run(run_id)
        if run is None or run.owner != owner or run.thread_id != thread_id:
            return None
        return run

    async def find_idempotent_run(self, owner: str, key: str) -> RunRecord | None:
        """Return the owner's run created with an `Idempotency-Key`, or None."""
        rows = await self._read(
            "SELECT * FROM runs WHERE owner = ? AND idempotency_key = ?", (owner, key)
        )
        return _run(rows[0]) if rows else None

    async def list_runs(
        self, thread_id: str, *, limit: int = 10, offset: int = 0, status: str | None = None
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first."""
        sql = "SELECT * FROM runs WHERE thread_id = ?"
        params: list[Any] = [thread_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        return [_run(row) for row in await self._read(sql, [*params, limit, offset])]

    async def active_runs(self, thread_id: str | None = None) -> list[RunRecord]:
        """Return pending and running runs (of one thread, or all), oldest first."""
        sql = "SELECT * FROM runs WHERE status IN ('pending', 'running')"
        params: list[Any] = []
        if thread_id is not None:
            sql += " AND thread_id = ?"
            params.append(thread_id)
        return [_run(row) for row in await self._read(sql + " ORDER BY created_at, rowid", params)]

    @staticmethod
    def run_status_statement(
        run_id: str,
        status: str,
        *,
        attempt: int | None = None,
        cancel_reason: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> Statement:
        """Return the statement that records a run's status (finished when terminal)."""
        stamp = now()
        finished = None if status in ACTIVE_STATUSES else stamp
        return (
            "UPDATE runs SET status = ?, updated_at = ?, finished_at = ?, "
            "attempt = COALESCE(?, attempt), cancel_reason = COALESCE(?, cancel_reason), "
            "error = COALESCE(?, error) WHERE run_id = ?",
            (
                status,
                stamp,
                finished,
                attempt,
                cancel_reason,
                None if error is None else dumps(error),
                run_id,
            ),
        )

    async def delete_run(self, run_id: str) -> None:
        """Delete a run record and its event log."""
        async with self.transaction() as db:
            await db.execute("DELETE FROM run_events WHERE run_id = ?", (run_id,))
            await db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
