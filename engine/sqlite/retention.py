"""The retention sweep's claims on expired threads in SQLite (`RetentionRepository`).

A claim is one `UPDATE … RETURNING` under the database's write lock: it marks the
expired threads it takes with the sweep's name and a lease (`sweep_owner`,
`sweep_until`, Unix seconds), so a second sweep on the same file skips them. Times
are the sweep's clock (`now`), as the TTLs' expiries are.
"""

from __future__ import annotations

from datetime import datetime

from engine.retention import ExpiredThread
from engine.sqlite.database import SqliteDatabase

#: A thread with a pending or running run is not swept (its TTL counts again when the run ends).
_IDLE = (
    "NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id "
    "AND r.status IN ('pending', 'running'))"
)


class SqliteRetention:
    """Claims on expired threads in the run engine's SQLite database."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def claim_expired(
        self, worker: str, now: datetime, limit: int, lease_seconds: float
    ) -> list[ExpiredThread]:
        """Claim up to `limit` idle threads expired at `now`, oldest expiry first."""
        clock = now.timestamp()
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE threads SET sweep_owner = ?, sweep_until = ? WHERE thread_id IN ("
                "SELECT t.thread_id FROM threads t WHERE t.expires_at <= ? "
                f"AND (t.sweep_until IS NULL OR t.sweep_until <= ?) AND {_IDLE} "
                "ORDER BY t.expires_at LIMIT ?) RETURNING thread_id, owner, ttl_strategy",
                (worker, clock + lease_seconds, clock, clock, limit),
            )
            rows = list(await cursor.fetchall())
        return [ExpiredThread(row[0], row[1], row[2] or "delete") for row in rows]

    async def holds(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Whether `worker` still holds the thread, expired at `now` and idle."""
        rows = await self._db.read(
            "SELECT 1 FROM threads t WHERE t.thread_id = ? AND t.sweep_owner = ? "
            f"AND t.expires_at <= ? AND {_IDLE}",
            (thread_id, worker, now.timestamp()),
        )
        return bool(rows)

    async def rearm(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Count a held thread's TTL again from `now` and release it; False: not held."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE threads SET expires_at = ? + ttl_minutes * 60, sweep_owner = NULL, "
                "sweep_until = NULL WHERE thread_id = ? AND sweep_owner = ? "
                "AND ttl_minutes IS NOT NULL",
                (now.timestamp(), thread_id, worker),
            )
            return cursor.rowcount == 1

    async def release(self, worker: str, thread_id: str) -> None:
        """Release a claim without acting on the thread."""
        await self._db.execute(
            [
                (
                    "UPDATE threads SET sweep_owner = NULL, sweep_until = NULL "
                    "WHERE thread_id = ? AND sweep_owner = ?",
                    (thread_id, worker),
                )
            ]
        )
