"""Each run's event log in the run engine's SQLite database (`EventLog`), group-committed.

The queueing, batching, retries and loss handling are `engine.group_commit`'s;
this module writes a batch in one `BEGIN IMMEDIATE` transaction on the writer
connection and retries what SQLite reports as operational (locked, full, I/O).
"""

from __future__ import annotations

import sqlite3

import aiosqlite

from engine.group_commit import RETRY_FOR, GroupCommitEventLog, QueuedWrite, write_in_order
from engine.protocols import Publish
from engine.records import (
    KEPT_AFTER_PRUNING,
    Frame,
    RecordChange,
    RunStatusChange,
    RunUsageRecorded,
    WebhookQueued,
)
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.quotas import run_usage_statement
from engine.sqlite.runs import run_status_statement
from engine.sqlite.threads import Statement, thread_state_statement
from engine.sqlite.webhooks import webhook_queued_statement

_INSERT_FRAME = "INSERT INTO run_events (run_id, id, event, data) VALUES (?, ?, ?, ?)"

__all__ = ["RETRY_FOR", "SqliteEventLog", "change_statement"]


def change_statement(change: RecordChange) -> Statement:
    """Return the statement that writes a run-status, thread-state, outbox or usage change."""
    if isinstance(change, RunStatusChange):
        return run_status_statement(change)
    if isinstance(change, WebhookQueued):
        return webhook_queued_statement(change)
    if isinstance(change, RunUsageRecorded):
        return run_usage_statement(change)
    return thread_state_statement(change)


class SqliteEventLog(GroupCommitEventLog):
    """Run event logs in SQLite with group-committed appends (see `engine.protocols.EventLog`).

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
        super().__init__(publish, retry_for=retry_for)
        self._db = db

    @property
    def close_timeout(self) -> float:
        """Seconds `close` waits for what is queued: a busy wait, then the retries."""
        return self._db.busy_timeout + self.retry_for + 1

    def _retryable(self, error: BaseException) -> bool:
        """Locked, full and I/O errors may pass; a constraint never does."""
        return isinstance(error, sqlite3.OperationalError)

    async def _commit(self, items: list[QueuedWrite]) -> None:
        """Write items in one transaction."""
        async with self._db.transaction() as db:
            await self._write_items(db, items)

    @staticmethod
    async def _write_items(db: aiosqlite.Connection, items: list[QueuedWrite]) -> None:
        """Write items in queue order (a run's frames before the changes queued after)."""
        await write_in_order(
            items,
            lambda rows: db.executemany(_INSERT_FRAME, rows),
            lambda change: db.execute(*change_statement(change)),
        )

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
