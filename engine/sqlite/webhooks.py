"""The webhook outbox in the run engine's SQLite database (`engine.webhooks.DeliveryStore`).

One process owns the database (`engine.sqlite.ownership`), so leases only keep the
deliverer's own concurrent sends apart; `clear_leases` frees what a stopped process
held. Due times and leases are Unix seconds (REAL).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from engine.records import WebhookQueued, now
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.threads import Statement
from engine.webhooks import Attempt, Delivery, OutboxTotals, delivery_json


def webhook_queued_statement(change: WebhookQueued) -> Statement:
    """Return the statement that queues a delivery (once per id)."""
    stamp = now()
    return (
        "INSERT INTO webhook_deliveries (delivery_id, run_id, thread_id, owner, url, body, "
        "created_at, updated_at, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (delivery_id) DO NOTHING",
        (
            change.delivery_id,
            change.run_id,
            change.thread_id,
            change.owner,
            change.url,
            change.body,
            stamp,
            stamp,
            time.time(),
        ),
    )


class SqliteDeliveryStore:
    """Webhook deliveries and their attempts in SQLite."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def clear_leases(self) -> None:
        """Free every lease (a process that owns the database starts delivering)."""
        await self._db.execute(
            [("UPDATE webhook_deliveries SET lease_owner = NULL, lease_expires_at = NULL", ())]
        )

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[Delivery]:
        """Lease up to `limit` due pending deliveries to `worker`, oldest due first."""
        clock = time.time()
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE webhook_deliveries SET lease_owner = ?, lease_expires_at = ? "
                "WHERE delivery_id IN (SELECT delivery_id FROM webhook_deliveries "
                "WHERE status = 'pending' AND next_attempt_at <= ? "
                "AND (lease_expires_at IS NULL OR lease_expires_at < ?) "
                "ORDER BY next_attempt_at LIMIT ?) "
                "RETURNING delivery_id, run_id, owner, url, body, attempts, created_at",
                (worker, clock + lease_seconds, clock, clock, limit),
            )
            rows = list(await cursor.fetchall())
        return [
            Delivery(
                delivery_id=row["delivery_id"],
                run_id=row["run_id"],
                url=row["url"],
                body=row["body"],
                attempts=row["attempts"],
                queued_at=datetime.fromisoformat(row["created_at"]).timestamp(),
                owner=row["owner"],
            )
            for row in rows
        ]

    async def record(
        self, delivery: Delivery, attempt: Attempt, *, worker: str, retry_in: float | None
    ) -> bool:
        """Record an attempt and the delivery's new state; release the lease."""
        if attempt.outcome == "success":
            status, due = "success", None
        elif retry_in is not None:
            status, due = "pending", time.time() + retry_in
        else:
            status, due = "failed", None
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE webhook_deliveries SET status = ?, attempts = ?, updated_at = ?, "
                "next_attempt_at = COALESCE(?, next_attempt_at), last_error = ?, "
                "lease_owner = NULL, lease_expires_at = NULL "
                "WHERE delivery_id = ? AND lease_owner = ? AND status = 'pending'",
                (
                    status,
                    attempt.number,
                    now(),
                    due,
                    attempt.error,
                    delivery.delivery_id,
                    worker,
                ),
            )
            if cursor.rowcount != 1:
                return False
            await db.execute(
                "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, outcome, "
                "status_code, latency_ms, error, excerpt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
        await self._db.execute(
            [
                (
                    "UPDATE webhook_deliveries SET lease_owner = NULL, lease_expires_at = NULL "
                    "WHERE lease_owner = ?",
                    (worker,),
                )
            ]
        )

    async def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's deliveries, each with its attempts."""
        deliveries = await self._db.read(
            "SELECT delivery_id, url, status, attempts, created_at, updated_at, "
            "next_attempt_at, last_error FROM webhook_deliveries WHERE run_id = ? "
            "ORDER BY created_at",
            (run_id,),
        )
        result = []
        for row in deliveries:
            attempts = await self._db.read(
                "SELECT attempt, started_at, outcome, status_code, latency_ms, error, excerpt "
                "FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempt",
                (row["delivery_id"],),
            )
            due = datetime.fromtimestamp(row["next_attempt_at"], UTC).isoformat()
            result.append(
                delivery_json({**dict(row), "next_attempt_at": due}, [dict(a) for a in attempts])
            )
        return result

    async def totals(self) -> OutboxTotals:
        """Return how many deliveries the outbox holds by status, and attempts by outcome."""
        deliveries = await self._db.read(
            "SELECT status, count(*) FROM webhook_deliveries GROUP BY status"
        )
        attempts = await self._db.read(
            "SELECT outcome, count(*) FROM webhook_attempts GROUP BY outcome"
        )
        return OutboxTotals.of(
            ((row[0], row[1]) for row in deliveries), ((row[0], row[1]) for row in attempts)
        )

    async def prune(self, before: datetime) -> int:
        """Delete the deliveries that ended before `before`, with their attempts; return how many.

        Pending deliveries are never pruned. `updated_at` of an ended delivery is when
        its last attempt was recorded.
        """
        cutoff = before.astimezone(UTC).isoformat()
        ended = "status <> 'pending' AND updated_at < ?"
        async with self._db.transaction() as db:
            await db.execute(
                "DELETE FROM webhook_attempts WHERE delivery_id IN "
                f"(SELECT delivery_id FROM webhook_deliveries WHERE {ended})",
                (cutoff,),
            )
            cursor = await db.execute(f"DELETE FROM webhook_deliveries WHERE {ended}", (cutoff,))
            return cursor.rowcount
