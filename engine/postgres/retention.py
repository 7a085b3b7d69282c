"""The retention sweep's claims on expired threads in PostgreSQL (`RetentionRepository`).

Every process of the deployment sweeps. A claim takes expired, idle threads with
`FOR UPDATE SKIP LOCKED` and marks them with the sweep's name and a lease
(`sweep_owner`, `sweep_until`; schema v10) in the same statement: a concurrent
claim skips the rows locked, and once committed finds them leased, so two sweeps
never take one thread. Times are the sweep's clock (`now`), as the expiries are.
"""

from __future__ import annotations

from datetime import datetime

from engine.postgres.pool import AsyncPool
from engine.retention import ExpiredThread

#: A thread with a pending or running run is not swept (its TTL counts again when the run ends).
_IDLE = (
    "NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id "
    "AND r.status IN ('pending', 'running'))"
)

_CLAIM = f"""
WITH expired AS (
    SELECT t.thread_id FROM threads t
    WHERE t.expires_at <= %(now)s
      AND (t.sweep_until IS NULL OR t.sweep_until <= %(now)s)
      AND {_IDLE}
    ORDER BY t.expires_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE threads t
SET sweep_owner = %(worker)s,
    sweep_until = %(now)s + make_interval(secs => %(lease)s)
FROM expired WHERE t.thread_id = expired.thread_id
RETURNING t.thread_id, t.owner, t.ttl_strategy
"""


class PostgresRetention:
    """Claims on expired threads in PostgreSQL."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def claim_expired(
        self, worker: str, now: datetime, limit: int, lease_seconds: float
    ) -> list[ExpiredThread]:
        """Claim up to `limit` idle threads expired at `now`, oldest expiry first."""
        async with self._pool.connection() as conn, conn.transaction():
            rows = await (
                await conn.execute(
                    _CLAIM, {"now": now, "limit": limit, "worker": worker, "lease": lease_seconds}
                )
            ).fetchall()
        return [
            ExpiredThread(row["thread_id"], row["owner"], row["ttl_strategy"] or "delete")
            for row in rows
        ]

    async def holds(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Whether `worker` still holds the thread, expired at `now` and idle."""
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT 1 AS held FROM threads t WHERE t.thread_id = %s "
                    f"AND t.sweep_owner = %s AND t.expires_at <= %s AND {_IDLE}",
                    (thread_id, worker, now),
                )
            ).fetchone()
        return row is not None

    async def rearm(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Count a held thread's TTL again from `now` and release it; False: not held."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "UPDATE threads SET expires_at = %s + make_interval(secs => ttl_minutes * 60), "
                "sweep_owner = NULL, sweep_until = NULL "
                "WHERE thread_id = %s AND sweep_owner = %s AND ttl_minutes IS NOT NULL",
                (now, thread_id, worker),
            )
            return cursor.rowcount == 1

    async def release(self, worker: str, thread_id: str) -> None:
        """Release a claim without acting on the thread."""
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE threads SET sweep_owner = NULL, sweep_until = NULL "
                "WHERE thread_id = %s AND sweep_owner = %s",
                (thread_id, worker),
            )
