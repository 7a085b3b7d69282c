"""Each run's event log in PostgreSQL (`EventLog`): group-committed and fenced by leases.

The queueing is `engine.group_commit`'s. What this backend adds is the fence: a
run this process executes under a lease (`hold`) has every batch of its writes
(frames, run status, thread state) committed in a transaction that first checks
its lease and locks the run's row until the commit — `SELECT … WHERE lease_owner =
… AND lease_epoch = … FOR SHARE` (`LOCK_HELD_LEASES`): no row version is written, so
a batch costs the database little more than its frames. Renewing is the lease
keeper's (`engine.postgres.worker`). When no row matches, the lease is lost (the
sweep gave the run to another worker): the transaction writes nothing, the run's
writes are given up (`LeaseLost`, never retried), `lease_lost(run_id)` says so and
`on_lost` tells the executor, which then stops without writing anything more. A
run this process does not hold (an API replica's thread-state change) is written
unfenced. Frames are published (Redis) only after their transaction committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import PoolTimeout

from engine.group_commit import (
    RETRY_FOR,
    FrameRow,
    GroupCommitEventLog,
    QueuedWrite,
    write_in_order,
)
from engine.postgres.pool import AsyncPool
from engine.postgres.quotas import run_usage_statement
from engine.postgres.runs import (
    LOCK_HELD_LEASES,
    Lease,
    leases_params,
    run_status_statement,
)
from engine.postgres.threads import Statement, thread_state_statement
from engine.postgres.webhooks import webhook_queued_statement
from engine.protocols import Publish
from engine.records import (
    KEPT_AFTER_PRUNING,
    CancelAction,
    Frame,
    RecordChange,
    RunStatusChange,
    RunUsageRecorded,
    WebhookQueued,
)

log = logging.getLogger(__name__)

#: Seconds a lease lasts after a claim or a renewal, unless renewed again.
LEASE_SECONDS = 30.0

#: Frames in one statement, a column array each: one statement for a batch of many runs'
#: frames costs the database less than a statement per frame.
_INSERT_FRAMES = (
    "INSERT INTO run_events (run_id, seq, event, data) "
    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[])"
)


class LeaseLost(RuntimeError):
    """The run's lease is held by another worker now (or the run ended): nothing was written."""

    def __init__(self, run_id: str) -> None:
        """Name the run whose lease was lost."""
        super().__init__(f"the lease of run {run_id} was lost")
        self.run_id = run_id


def change_statement(change: RecordChange) -> Statement:
    """Return the statement that writes a run-status, thread-state, outbox or usage change."""
    if isinstance(change, RunStatusChange):
        return run_status_statement(change)
    if isinstance(change, WebhookQueued):
        return webhook_queued_statement(change)
    if isinstance(change, RunUsageRecorded):
        return run_usage_statement(change)
    return thread_state_statement(change)


class PostgresEventLog(GroupCommitEventLog):
    """Run event logs in PostgreSQL, fenced by leases (see the module docstring)."""

    def __init__(
        self,
        pool: AsyncPool,
        publish: Publish | None = None,
        *,
        retry_for: float = RETRY_FOR,
    ) -> None:
        """Bind the log to the process's pool and the live fan-out.

        Args:
            pool: The process's async pool.
            publish: Called with every committed batch of a run's frames.
            retry_for: Seconds the writer retries a failing batch (connection lost).
        """
        super().__init__(publish, retry_for=retry_for)
        self._pool = pool
        self._leases: dict[str, Lease] = {}
        self._fenced: set[str] = set()
        #: Called with a held run's id and the cancel asked for it, seen by a batch's fence.
        self.on_cancel: Callable[[str, CancelAction], None] | None = None

    # -- leases ----------------------------------------------------------------------

    def hold(self, lease: Lease) -> None:
        """Fence the run's writes from now on with this lease."""
        self._leases[lease.run_id] = lease
        self._fenced.discard(lease.run_id)

    def release(self, run_id: str) -> None:
        """Stop fencing a run's writes (its execution here is over)."""
        self._leases.pop(run_id, None)
        self._fenced.discard(run_id)

    def lease(self, run_id: str) -> Lease | None:
        """Return the lease this log fences a run's writes with, if any."""
        return self._leases.get(run_id)

    def lease_lost(self, run_id: str) -> bool:
        """Whether a write of the run found its lease taken (the run is another's now)."""
        return run_id in self._fenced

    # -- writing ---------------------------------------------------------------------

    def _retryable(self, error: BaseException) -> bool:
        """A dropped connection or an exhausted pool may pass; a constraint or a fence never."""
        return isinstance(error, (psycopg.OperationalError, PoolTimeout))

    async def _commit(self, items: list[QueuedWrite]) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            cancels = await self._fence(conn, items)
            await self._write_items(conn, items)
        for run_id, action in cancels.items():
            if self.on_cancel is not None:
                try:
                    self.on_cancel(run_id, action)
                except Exception:
                    log.exception("on_cancel failed for run %s", run_id)

    async def _fence(
        self, conn: AsyncConnection[DictRow], items: list[QueuedWrite]
    ) -> dict[str, CancelAction]:
        """Check and lock the lease of every held run in the batch; `LeaseLost` for one lost.

        One statement for all of them, locking their rows in run id order (see
        `LOCK_HELD_LEASES`); the locks last until the batch commits. Returns the
        cancels requested for them.
        """
        held = sorted(
            {item.run_id for item in items if item.run_id is not None} & self._leases.keys()
        )
        if not held:
            return {}
        leases = [self._leases[run_id] for run_id in held]
        rows = await (await conn.execute(LOCK_HELD_LEASES, leases_params(leases))).fetchall()
        held_still = {row["run_id"]: row["cancel_requested"] for row in rows}
        for run_id in held:
            if run_id not in held_still:
                self._fenced.add(run_id)
                raise LeaseLost(run_id)
        return {run_id: action for run_id, action in held_still.items() if action is not None}

    @staticmethod
    async def _write_items(conn: AsyncConnection[DictRow], items: list[QueuedWrite]) -> None:
        """Write items in queue order (a run's frames before the changes queued after)."""
        async with conn.cursor() as cur:

            async def insert_frames(rows: list[FrameRow]) -> None:
                await cur.execute(_INSERT_FRAMES, [list(c) for c in zip(*rows, strict=True)])

            await write_in_order(
                items, insert_frames, lambda change: cur.execute(*change_statement(change))
            )

    # -- reading ---------------------------------------------------------------------

    async def read(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT seq, event, data FROM run_events WHERE run_id = %s AND seq > %s "
                    "ORDER BY seq LIMIT %s",
                    (run_id, after, limit),
                )
            ).fetchall()
        return [Frame(row["seq"], row["event"], row["data"]) for row in rows]

    async def last_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT coalesce(max(seq), 0) AS last FROM run_events WHERE run_id = %s",
                    (run_id,),
                )
            ).fetchone()
        return int(row["last"]) if row is not None else 0

    async def prune(self, finished_before: str) -> int:
        """Drop the logs of runs finished before a time, keeping their final frames.

        Returns:
            The number of runs whose logs were pruned.
        """
        async with self._pool.connection() as conn, conn.transaction():
            rows = await (
                await conn.execute(
                    "UPDATE runs SET events_pruned = true WHERE NOT events_pruned "
                    "AND finished_at IS NOT NULL AND finished_at < %s::timestamptz "
                    "RETURNING run_id",
                    (finished_before,),
                )
            ).fetchall()
            run_ids = [row["run_id"] for row in rows]
            if run_ids:
                await conn.execute(
                    "DELETE FROM run_events WHERE run_id = ANY(%s) AND NOT (event = ANY(%s))",
                    (run_ids, list(KEPT_AFTER_PRUNING)),
                )
        return len(run_ids)
