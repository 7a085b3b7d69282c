"""The webhook outbox in PostgreSQL (`engine.webhooks.DeliveryStore`), schema v3.

Every process that runs workers runs a deliverer; they share the outbox. A claim
takes due rows with `FOR UPDATE SKIP LOCKED` and leases them (owner and expiry
from the database clock), so two deliverers never send one delivery at once; a
stopped deliverer's leases run out and another resumes its deliveries. Recording
an attempt is fenced by the lease owner.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.postgres.pool import AsyncPool
from engine.postgres.threads import Statement, stamp
from engine.records import WebhookQueued
from engine.webhooks import Attempt, Delivery, OutboxTotals, delivery_json


def webhook_queued_statement(change: WebhookQueued) -> Statement:
    """Return the statement that queues a delivery (once per id)."""
    return (
        "INSERT INTO webhook_deliveries (delivery_id, run_id, thread_id, owner, url, body) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (delivery_id) DO NOTHING",
        (
            change.delivery_id,
            change.run_id,
            change.thread_id,
            change.owner,
            change.url,
            change.body,
        ),
    )


_CLAIM = """
WITH due AS (
    SELECT delivery_id FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at <= now()
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET lease_owner = %(worker)s,
    lease_expires_at = now() + make_interval(secs => %(lease)s)
FROM due WHERE d.delivery_id = due.delivery_id
RETURNING d.delivery_id, d.run_id, d.owner, d.url, d.body, d.attempts,
          extract(epoch FROM d.created_at)::float8 AS queued_at
"""


class PostgresDeliveryStore:
    """Webhook deliveries and their attempts in PostgreSQL."""

    def __init__(self, pool: AsyncPool) -> None:
        """Use the process's pool."""
        self._pool = pool

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[Delivery]:
        """Lease up to `limit` due pending deliveries to `worker`, oldest due first."""
        async with self._pool.connection() as conn, conn.transaction():
            rows = await (
                await conn.execute(
                    _CLAIM, {"limit": limit, "worker": worker, "lease": lease_seconds}
                )
            ).fetchall()
        return [
            Delivery(
                delivery_id=row["delivery_id"],
                run_id=row["run_id"],
                url=row["url"],
                body=row["body"],
                attempts=row["attempts"],
                queued_at=row["queued_at"],
                owner=row["owner"],
            )
            for row in rows
        ]

    async def record(
        self, delivery: Delivery, attempt: Attempt, *, worker: str, retry_in: float | None
    ) -> bool:
        """Record an attempt and the delivery's new state; release the lease."""
        if attempt.outcome == "success":
            status = "success"
        elif retry_in is not None:
            status = "pending"
        else:
            status = "failed"
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE webhook_deliveries SET status = %s, attempts = %s, "
                    "updated_at = now(), last_error = %s, lease_owner = NULL, "
                    "lease_expires_at = NULL, next_attempt_at = CASE WHEN %s::float8 IS NULL "
                    "THEN next_attempt_at ELSE now() + make_interval(secs => %s::float8) END "
                    "WHERE delivery_id = %s AND lease_owner = %s AND status = 'pending' "
                    "RETURNING delivery_id",
                    (
                        status,
                        attempt.number,
                        attempt.error,
                        retry_in,
                        retry_in,
                        delivery.delivery_id,
                        worker,
                    ),
                )
            ).fetchone()
            if row is None:
                return False
            await conn.execute(
                "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, outcome, "
                "status_code, latency_ms, error, excerpt) "
                "VALUES (%s, %s, %s::timestamptz, %s, %s, %s, %s, %s)",
                (
                    delivery.delivery_id,
                    attempt.number,
                    attempt.started_at,
                    attempt.outcome,
                    attempt.status_code,
                    attempt.latency_ms,
                    attempt.error,
                    attempt.excerpt,
                ),
            )
        return True

    async def release(self, worker: str) -> None:
        """Release every lease `worker` holds."""
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE webhook_deliveries SET lease_owner = NULL, lease_expires_at = NULL "
                "WHERE lease_owner = %s AND status = 'pending'",
                (worker,),
            )

    async def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's deliveries, each with its attempts."""
        async with self._pool.connection() as conn:
            deliveries = await (
                await conn.execute(
                    "SELECT delivery_id, url, status, attempts, created_at, updated_at, "
                    "next_attempt_at, last_error FROM webhook_deliveries WHERE run_id = %s "
                    "ORDER BY created_at",
                    (run_id,),
                )
            ).fetchall()
            result = []
            for row in deliveries:
                attempts = await (
                    await conn.execute(
                        "SELECT attempt, started_at, outcome, status_code, latency_ms, error, "
                        "excerpt FROM webhook_attempts WHERE delivery_id = %s ORDER BY attempt",
                        (row["delivery_id"],),
                    )
                ).fetchall()
                times = {
                    key: stamp(row[key]) for key in ("created_at", "updated_at", "next_attempt_at")
                }
                shown = [{**a, "started_at": stamp(a["started_at"])} for a in attempts]
                result.append(delivery_json({**row, **times}, shown))
        return result

    async def totals(self) -> OutboxTotals:
        """Return how many deliveries the outbox holds by status, and attempts by outcome."""
        async with self._pool.connection() as conn:
            deliveries = await (
                await conn.execute(
                    "SELECT status, count(*) AS n FROM webhook_deliveries GROUP BY status"
                )
            ).fetchall()
            attempts = await (
                await conn.execute(
                    "SELECT outcome, count(*) AS n FROM webhook_attempts GROUP BY outcome"
                )
            ).fetchall()
        return OutboxTotals.of(
            ((row["status"], row["n"]) for row in deliveries),
            ((row["outcome"], row["n"]) for row in attempts),
        )

    async def prune(self, before: datetime) -> int:
        """Delete the deliveries that ended before `before`; return how many.

        Their attempts go with them (a foreign key, `ON DELETE CASCADE`); pending
        deliveries are never pruned.
        """
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND updated_at < %s",
                (before,),
            )
            return cursor.rowcount
