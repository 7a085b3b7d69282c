"""Each run's event log in the run engine's SQLite database (`EventLog`), group-committed.

`append` queues a frame and returns at once; a writer task commits everything
queued so far in one transaction and only then hands the frames to `publish`
(the live fan-out), so a subscriber never sees a frame that a crash could take
back, and a rejoin after a restart continues with the next durable id. Run-status
and thread-state changes queued with `record` commit in the same transaction,
after the frames queued before them. A batch that fails is retried with backoff
(a locked or full database often comes back); one that still fails is split by
run, so only the runs whose own writes fail are *lost*: their queued frames are
dropped (never half-written, never published), `flush(run_id)` raises
`StoreError`, and the `on_lost` callback tells the executor, which ends the run
loudly from its first lost frame id (`reopen`) or leaves it for recovery.
Nothing is counted committed that was not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiosqlite

from app.runs.protocols import Publish, StoreError
from app.runs.records import KEPT_AFTER_PRUNING, Frame, RecordChange, RunStatusChange
from app.runs.sqlite.database import SqliteDatabase
from app.runs.sqlite.runs import run_status_statement
from app.runs.sqlite.threads import Statement, thread_state_statement

log = logging.getLogger(__name__)

#: Seconds the event writer keeps retrying a batch that fails before giving its runs up.
RETRY_FOR = 10.0

_INSERT_FRAME = "INSERT INTO run_events (run_id, id, event, data) VALUES (?, ?, ?, ?)"


def change_statement(change: RecordChange) -> Statement:
    """Return the statement that writes a run-status or thread-state change."""
    if isinstance(change, RunStatusChange):
        return run_status_statement(change)
    return thread_state_statement(change)


@dataclass(frozen=True, slots=True)
class _Item:
    """One queued write: a frame or a record change, of a run (None: of no run)."""

    run_id: str | None
    generation: int
    frame: Frame | None = None
    change: RecordChange | None = None


class SqliteEventLog:
    """Run event logs in SQLite with group-committed appends (see `app.runs.protocols.EventLog`).

    `start()` starts the writer task; `close()` commits what is queued and stops it.
    `publish(run_id, frames)` is called with every committed batch of a run's frames,
    in id order.
    """

    def __init__(
        self, db: SqliteDatabase, publish: Publish | None = None, *, retry_for: float = RETRY_FOR
    ) -> None:
        """Bind the log to the engine's database and the live fan-out.

        Args:
            db: The database.
            publish: Called with every committed batch of a run's frames.
            retry_for: Seconds the writer retries a failing batch before the runs it
                carries are lost.
        """
        self._db = db
        self._publish = publish or (lambda _run_id, _frames: None)
        self.retry_for = retry_for
        #: Called with a run id when the run's queued writes are lost (see `reopen`).
        self.on_lost: Callable[[str], None] | None = None
        self._pending: list[_Item] = []
        self._queued = 0  # items queued since open
        self._resolved = 0  # of those, how many are committed or given up
        self._lost: dict[str, int | None] = {}  # run → its first frame id not durable (if any)
        self._generation: dict[str, int] = {}  # run → bumped by `reopen`
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_loop(), name="run-events-writer")

    async def close(self) -> None:
        """Commit what is queued (within a bound) and stop the writer; idempotent."""
        if self._writer is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self._db.busy_timeout + self.retry_for + 1):
                await self.flush()
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        self._writer = None

    # -- appending -----------------------------------------------------------------

    def append(self, run_id: str, frame: Frame) -> None:
        """Queue a frame for the run's log; it is committed, then published, shortly."""
        self._queue(_Item(run_id, self._generation.get(run_id, 0), frame=frame))

    def record(self, change: RecordChange, *, run_id: str | None = None) -> None:
        """Queue a change to commit with the next batch of frames (after them).

        Args:
            change: The run-status or thread-state change.
            run_id: The run it records (its fate follows the run's frames: a lost run's
                change is dropped with them); None for a change of no run.
        """
        generation = self._generation.get(run_id, 0) if run_id is not None else 0
        self._queue(_Item(run_id, generation, change=change))

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
        async with self._db.transaction() as db:
            await self._write_items(db, items)

    @staticmethod
    async def _write_items(db: aiosqlite.Connection, items: list[_Item]) -> None:
        """Write items in queue order (a run's frames before the changes queued after)."""
        rows: list[tuple[str, int, str, str]] = []
        for item in items:
            if item.frame is not None:
                assert item.run_id is not None
                rows.append((item.run_id, item.frame.id, item.frame.event, item.frame.data))
                continue
            if rows:
                await db.executemany(_INSERT_FRAME, rows)
                rows = []
            assert item.change is not None
            await db.execute(*change_statement(item.change))
        if rows:
            await db.executemany(_INSERT_FRAME, rows)

    def _give_up(self, run_id: str | None, items: list[_Item], error: BaseException) -> None:
        if run_id is None:
            log.error("a change of no run could not be committed: %s", error)
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

    # -- reading -------------------------------------------------------------------

    async def read(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        rows = await self._db.read(
            "SELECT id, event, data FROM run_events WHERE run_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (run_id, after, limit),
        )
        return [Frame(row[0], row[1], row[2]) for row in rows]

    async def last_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        rows = await self._db.read(
            "SELECT COALESCE(MAX(id), 0) FROM run_events WHERE run_id = ?", (run_id,)
        )
        return int(rows[0][0]) if rows else 0

    async def prune(self, finished_before: str) -> int:
        """Drop the logs of runs finished before a time, keeping their final frames.

        Returns:
            The number of runs whose logs were pruned.
        """
        kept = ", ".join(f"'{event}'" for event in KEPT_AFTER_PRUNING)
        async with self._db.transaction() as db:
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
