"""The run engine's storage in PostgreSQL: the scale-out backend (`DATABASE_URL`).

    threads.py      PostgresThreadRepository (ThreadRepository)
    runs.py         PostgresRunRepository (RunRepository), and the runs table as the queue:
                    claim, renew, hand back, sweep, request a cancel
    event_log.py    PostgresEventLog (EventLog), group-committed appends fenced by leases
    live.py         RedisLiveFrames (LiveFrames): committed frames to every process's
                    followers, falling back to re-reading PostgreSQL when Redis drops
    checkpoints.py  the saver fenced by leases, PostgresCheckpoints (housekeeping)
    queue.py        QueueExecutor: the API's executor, which leaves runs to the workers
    worker.py       RunWorker: claims runs, executes them under a lease, hands them back
    webhooks.py     PostgresDeliveryStore: the webhook outbox, claimed with SKIP LOCKED
    retention.py    PostgresRetention: the retention sweep's claims on expired threads,
                    with SKIP LOCKED (schema v10)
    assistants.py   PostgresAssistantRepository (AssistantRepository): created assistants
                    and their versions (schema v5)
    backend.py      open_postgres_backend: all of the above for one process (RunBackend)
    pool.py         the psycopg connection pools and LangGraph's `AsyncPostgresSaver`
    migrations.py   the versioned schema, applied by `atelier db upgrade` and at start
    redis_pubsub.py the Redis client, best-effort publish, a reconnecting subscription
    resources.py    open_backend: the pools, schema, checkpointer and Redis of one process

The driver modules import psycopg and redis (the `scale` extra) at the top, so import
them only when the settings ask for the scale-out backend.

`PostgresRunStorage` puts the three repositories and the outbox on one connection
pool (opened and closed by its owner, `engine.postgres.resources.open_backend`, which
`backend.py` enters); use it as an async context manager to start and stop the event
writer. The tables are schema v1-v3's (`engine.postgres.migrations`).
"""

from __future__ import annotations

from typing import Self

from engine.group_commit import RETRY_FOR
from engine.postgres.event_log import LEASE_SECONDS, LeaseLost, PostgresEventLog
from engine.postgres.pool import AsyncPool, ping
from engine.postgres.runs import Claim, Lease, PostgresRunRepository, Sweep
from engine.postgres.threads import PostgresThreadRepository
from engine.postgres.webhooks import PostgresDeliveryStore
from engine.protocols import Publish


class PostgresRunStorage:
    """Threads, runs and event logs in PostgreSQL (a `RunStorage`)."""

    def __init__(
        self,
        pool: AsyncPool,
        publish: Publish | None = None,
        *,
        retry_for: float = RETRY_FOR,
    ) -> None:
        """Bind the storage to an open pool on a migrated database; nothing starts yet.

        Args:
            pool: The process's async pool.
            publish: Called with every committed batch of a run's frames (the live fan-out).
            retry_for: Seconds the event writer retries a failing batch before the runs
                it carries are lost.
        """
        self.pool = pool
        self.threads = PostgresThreadRepository(pool)
        self.runs = PostgresRunRepository(pool)
        self.events = PostgresEventLog(pool, publish, retry_for=retry_for)
        self.deliveries = PostgresDeliveryStore(pool)
        self._started = False

    async def open(self) -> Self:
        """Start the event writer."""
        if not self._started:
            self.events.start()
            self._started = True
        return self

    async def close(self) -> None:
        """Commit what is queued and stop the writer; idempotent (the pool stays open)."""
        if self._started:
            await self.events.close()
            self._started = False

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Run a query on a pooled connection (readiness)."""
        await ping(self.pool)


__all__ = [
    "LEASE_SECONDS",
    "Claim",
    "Lease",
    "LeaseLost",
    "PostgresRunStorage",
    "Sweep",
]
