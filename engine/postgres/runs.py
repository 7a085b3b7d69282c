"""Runs in PostgreSQL (`RunRepository`), and the runs table as the queue of the workers.

Besides the repository operations, the runs table is the queue (schema v1,
`engine.postgres.migrations`):

- `claim` takes the oldest pending run (`seq` order) of a thread that has no running
  run, with `SELECT … FOR UPDATE SKIP LOCKED`, and in the same statement sets it
  running under a lease: `lease_owner`, `lease_epoch` + 1 and `lease_expires_at` from
  the database clock. The unique index `runs_one_running_per_thread` refuses a second
  running run of a thread whatever the race, so a claim that loses it claims nothing.
- `renew` extends a lease only where owner and epoch still match, and says whether a
  cancel was requested meanwhile (`cancel_requested`, set by `request_cancel` from any
  replica).
- `hand_back` returns a held run to the queue (a worker stopping gracefully).
- `sweep` returns the runs whose lease expired to the queue, or ends them with `error`
  and `end` frames once they used up their attempts.

Every write of a held run's frames and status is fenced by its owner and epoch
(`engine.postgres.event_log`), so a worker that lost its lease writes nothing more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from engine.postgres.pool import AsyncPool
from engine.postgres.quotas import run_counts
from engine.postgres.threads import Statement, insert_thread, stamp
from engine.postgres.webhooks import webhook_queued_statement
from engine.protocols import StorageUnavailable
from engine.quotas import Limits, check_run_counts
from engine.records import (
    ACTIVE_STATUSES,
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    RunStatusChange,
    ThreadRecord,
    out_of_attempts,
    run_from_row,
)
from engine.serde import dumps
from engine.webhooks import queued_delivery

log = logging.getLogger(__name__)

RUN_COLUMNS = (
    "run_id, thread_id, owner, assistant_id, status, created_at, updated_at, finished_at, "
    "metadata, kwargs, multitask_strategy, attempt, cancel_reason, error, idempotency_key, "
    "request_hash"
)
_INSERT_COLUMNS = (
    "run_id, thread_id, owner, assistant_id, status, created_at, updated_at, metadata, "
    "kwargs, multitask_strategy, attempt, idempotency_key, request_hash"
)
_INSERT_VALUES = "%s, %s, %s, %s, %s, %s::timestamptz, %s::timestamptz, %s, %s, %s, %s, %s, %s"

#: The lease renewal: only where owner and epoch still match (the fence), from the
#: database clock. Returns the run's requested cancel, if any.
RENEW_LEASE = (
    "UPDATE runs SET lease_expires_at = now() + make_interval(secs => %(lease)s) "
    "WHERE run_id = %(run_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s "
    "AND status = 'running' RETURNING cancel_requested"
)


#: The renewal of many leases in one statement, each only where its owner and epoch
#: still match. The rows are locked in run id order: every statement that locks several
#: runs' rows does so in that order (the event log's fence, the lease keeper), so two
#: of them never wait for each other in a cycle (a deadlock). Returns the runs renewed
#: and their requested cancels.
RENEW_LEASES = """
WITH held AS (
    SELECT r.run_id FROM runs r
    JOIN unnest(%(run_ids)s::text[], %(epochs)s::bigint[], %(owners)s::text[])
        AS l (run_id, epoch, owner)
        ON r.run_id = l.run_id AND r.lease_epoch = l.epoch AND r.lease_owner = l.owner
    WHERE r.status = 'running'
    ORDER BY r.run_id
    FOR UPDATE OF r
)
UPDATE runs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
FROM held WHERE runs.run_id = held.run_id
RETURNING runs.run_id, runs.cancel_requested
"""


#: The runs among some leases that are still held (owner and epoch match, running),
#: with their requested cancels; reads only (the lease keeper's check between renewals).
HELD_LEASES = """
SELECT r.run_id, r.cancel_requested FROM runs r
JOIN unnest(%(run_ids)s::text[], %(epochs)s::bigint[], %(owners)s::text[])
    AS l (run_id, epoch, owner)
    ON r.run_id = l.run_id AND r.lease_epoch = l.epoch AND r.lease_owner = l.owner
WHERE r.status = 'running'
ORDER BY r.run_id
"""

#: `HELD_LEASES`, locking the rows until the transaction ends (the event log's fence):
#: the sweep skips them (`SKIP LOCKED`) and a renewal waits, so the lease stays this
#: worker's until the commit. A share lock writes no row version, unlike a renewal.
#: Rows are locked in run id order, as `RENEW_LEASES` locks them.
LOCK_HELD_LEASES = HELD_LEASES + "FOR SHARE OF r\n"


def leases_params(leases: list[Lease]) -> dict[str, Any]:
    """Return the parameters of `HELD_LEASES` and `LOCK_HELD_LEASES` for some leases."""
    return {
        "run_ids": [lease.run_id for lease in leases],
        "epochs": [lease.epoch for lease in leases],
        "owners": [lease.owner for lease in leases],
    }


def renew_leases_params(leases: list[Lease], lease_seconds: float) -> dict[str, Any]:
    """Return the parameters of `RENEW_LEASES` for some leases."""
    return {**leases_params(leases), "lease": lease_seconds}


def run_status_statement(change: RunStatusChange) -> Statement:
    """Return the statement that records a run's status (finished, lease-free when terminal)."""
    terminal = change.status not in ACTIVE_STATUSES
    return (
        "UPDATE runs SET status = %(status)s, updated_at = now(), "
        "finished_at = CASE WHEN %(terminal)s THEN now() END, "
        "lease_expires_at = CASE WHEN %(terminal)s THEN NULL ELSE lease_expires_at END, "
        "attempt = coalesce(%(attempt)s, attempt), "
        "cancel_reason = coalesce(%(cancel_reason)s, cancel_reason), "
        "error = coalesce(%(error)s, error) WHERE run_id = %(run_id)s",
        {
            "status": change.status,
            "terminal": terminal,
            "attempt": change.attempt,
            "cancel_reason": change.cancel_reason,
            "error": None if change.error is None else dumps(change.error),
            "run_id": change.run_id,
        },
    )


def _run_params(run: RunRecord) -> tuple[Any, ...]:
    return (
        run.run_id,
        run.thread_id,
        run.owner,
        run.assistant_id,
        run.status,
        run.created_at,
        run.updated_at,
        Jsonb(run.metadata),
        dumps(run.options.to_json()),
        run.multitask_strategy,
        run.attempt,
        run.idempotency_key,
        run.request_hash,
    )


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on a running run: owner and epoch fence its writes."""

    run_id: str
    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Claim:
    """A run a worker claimed: the record, its lease, a cancel asked before the claim,
    and the id of the last frame its log holds (0 for a run never executed), read in
    the claim's own statement.
    """

    run: RunRecord
    lease: Lease
    cancel_requested: CancelAction | None
    last_id: int = 0


@dataclass
class Sweep:
    """What a sweep did: runs returned to the queue, runs ended with their last frames."""

    requeued: list[str]
    abandoned: dict[str, list[Frame]]


_CLAIM = f"""
WITH candidate AS (
    SELECT r.run_id FROM runs r
    WHERE r.status = 'pending'
      AND NOT EXISTS (
          SELECT 1 FROM runs x WHERE x.thread_id = r.thread_id AND x.status = 'running')
      AND NOT EXISTS (
          SELECT 1 FROM runs y
          WHERE y.thread_id = r.thread_id AND y.status = 'pending' AND y.seq < r.seq)
    ORDER BY r.seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE runs SET status = 'running', lease_owner = %(owner)s, lease_epoch = lease_epoch + 1,
    lease_expires_at = now() + make_interval(secs => %(lease)s), updated_at = now()
FROM candidate WHERE runs.run_id = candidate.run_id
RETURNING {", ".join(f"runs.{c.strip()}" for c in RUN_COLUMNS.split(","))},
    runs.lease_epoch, runs.cancel_requested,
    (SELECT coalesce(max(e.seq), 0) FROM run_events e WHERE e.run_id = runs.run_id) AS last_id,
    runs.seq
"""


async def insert_run(
    conn: AsyncConnection[DictRow],
    run: RunRecord,
    new_thread: ThreadRecord | None,
    *,
    exclusive: bool,
    limits: Limits | None = None,
) -> bool:
    """Insert a run (and its new thread) inside a transaction (see `PostgresRunRepository.insert`).

    With `limits`, the owner's lock is taken first and its runs and spend counted
    (`engine.postgres.quotas`): every replica's insert of the owner takes its turn.

    Returns:
        False when `exclusive` and the thread was busy (nothing is written).

    Raises:
        QuotaExceeded: The run would go over one of `limits` (nothing is written).
    """
    if limits is not None and limits.counts_runs:
        at = datetime.fromisoformat(run.created_at)
        check_run_counts(limits, await run_counts(conn, run.owner, limits, at), at)
    if new_thread is not None:
        await insert_thread(conn, new_thread)
    await conn.execute(
        "SELECT thread_id FROM threads WHERE thread_id = %s FOR UPDATE", (run.thread_id,)
    )
    if exclusive:
        busy = await (
            await conn.execute(
                "SELECT 1 AS one FROM runs WHERE thread_id = %s "
                "AND status IN ('pending', 'running') LIMIT 1",
                (run.thread_id,),
            )
        ).fetchone()
        if busy is not None:
            return False
    await conn.execute(
        f"INSERT INTO runs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES})", _run_params(run)
    )
    # Like LangGraph Platform, a thread learns the graph that first ran on it.
    await conn.execute(
        "UPDATE threads SET status = 'busy', updated_at = now(), metadata = CASE "
        "WHEN coalesce(jsonb_typeof(metadata -> 'graph_id'), 'null') = 'null' "
        "THEN metadata || jsonb_build_object('graph_id', %s::text, 'assistant_id', %s::text) "
        "ELSE metadata END WHERE thread_id = %s",
        (run.graph_id, run.assistant_id, run.thread_id),
    )
    return True


class PostgresRunRepository:
    """Runs in PostgreSQL (see `engine.protocols.RunRepository` and the module docstring)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    # -- the repository ------------------------------------------------------------

    async def insert(
        self,
        run: RunRecord,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool,
        limits: Limits | None = None,
    ) -> bool:
        """Store a pending run (and the thread it creates) in one transaction.

        With `exclusive`, the thread's row is locked first (`FOR UPDATE`), so two
        inserts on one thread from any processes take turns and the busy check holds.
        With `limits`, so do two inserts of one owner, and its runs are counted.

        Returns:
            False when `exclusive` and the thread was busy (nothing is written).

        Raises:
            StorageUnavailable: The database took no write (unreachable, no connection).
            ThreadExists: `new_thread`'s id is taken.
            QuotaExceeded: The run would go over one of `limits`.
        """
        try:
            async with self._pool.connection() as conn, conn.transaction():
                return await insert_run(conn, run, new_thread, exclusive=exclusive, limits=limits)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.exception("could not record a new run")
            raise StorageUnavailable(str(exc)) from exc

    async def get(self, run_id: str) -> RunRecord | None:
        """Return a run by id."""
        rows = await self._fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
        return run_from_row(rows[0], stamp) if rows else None

    async def find(self, owner: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run on a thread, or None."""
        run = await self.get(run_id)
        if run is None or run.owner != owner or run.thread_id != thread_id:
            return None
        return run

    async def find_idempotent(self, owner: str, key: str) -> RunRecord | None:
        """Return the owner's run created with an `Idempotency-Key`, or None."""
        rows = await self._fetch(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE owner = %s AND idempotency_key = %s",
            (owner, key),
        )
        return run_from_row(rows[0], stamp) if rows else None

    async def for_thread(
        self, thread_id: str, *, limit: int = 10, offset: int = 0, status: RunStatus | None = None
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first."""
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE thread_id = %s"
        params: list[Any] = [thread_id]
        if status is not None:
            sql += " AND status = %s"
            params.append(status)
        sql += " ORDER BY created_at DESC, seq DESC LIMIT %s OFFSET %s"
        rows = await self._fetch(sql, [*params, None if limit < 0 else limit, offset])
        return [run_from_row(row, stamp) for row in rows]

    async def active(self, thread_id: str | None = None) -> list[RunRecord]:
        """Return pending and running runs (of one thread, or all), oldest first."""
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('pending', 'running')"
        params: list[Any] = []
        if thread_id is not None:
            sql += " AND thread_id = %s"
            params.append(thread_id)
        rows = await self._fetch(sql + " ORDER BY seq", params)
        return [run_from_row(row, stamp) for row in rows]

    async def delete(self, run_id: str) -> None:
        """Delete a run record and its event log."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM run_events WHERE run_id = %s", (run_id,))
            await conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))

    # -- the queue -----------------------------------------------------------------

    async def claim(self, owner: str, lease_seconds: float) -> Claim | None:
        """Claim the oldest pending run of a thread with no running run; None when none is.

        Args:
            owner: The claiming worker's id (written to `lease_owner`).
            lease_seconds: How long the lease lasts without a renewal (database clock).
        """
        claims = await self.claim_many(owner, lease_seconds, 1)
        return claims[0] if claims else None

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Claim]:
        """Claim up to `limit` runs in one statement, oldest first, as `claim` claims one.

        Each is the oldest pending run of its thread (no two of one thread), on a thread
        with no running run. Empty when none is claimable, or when another worker set a
        run of one of those threads running first (the unique index refuses the whole
        statement; the caller claims again on its next wake-up or poll).
        """
        try:
            rows = await self._fetch(
                _CLAIM, {"owner": owner, "lease": lease_seconds, "limit": limit}
            )
        except psycopg.errors.UniqueViolation:
            return []  # another worker set a run of that thread running first
        claims = []
        for row in sorted(rows, key=lambda row: row["seq"]):
            run = run_from_row(row, stamp)
            lease = Lease(run.run_id, owner, row["lease_epoch"])
            claims.append(Claim(run, lease, row["cancel_requested"], int(row["last_id"])))
        return claims

    async def renew(self, lease: Lease, lease_seconds: float) -> tuple[bool, CancelAction | None]:
        """Extend a lease where owner and epoch still match.

        Returns:
            Whether the lease is still held, and the cancel requested for the run (if any).
        """
        rows = await self._fetch(
            RENEW_LEASE,
            {
                "lease": lease_seconds,
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
            },
        )
        if not rows:
            return False, None
        return True, rows[0]["cancel_requested"]

    async def hand_back(self, lease: Lease) -> bool:
        """Return a held run to the queue (pending, nobody's); False when the lease was lost."""
        rows = await self._fetch(
            "UPDATE runs SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, "
            "updated_at = now() WHERE run_id = %s AND lease_owner = %s AND lease_epoch = %s "
            "AND status = 'running' RETURNING run_id",
            (lease.run_id, lease.owner, lease.epoch),
        )
        return bool(rows)

    async def request_cancel(self, run_id: str, action: CancelAction) -> bool:
        """Ask for a run to be cancelled (read by its worker); False when it is not active."""
        rows = await self._fetch(
            "UPDATE runs SET cancel_requested = %s, updated_at = now() "
            "WHERE run_id = %s AND status IN ('pending', 'running') RETURNING run_id",
            (action, run_id),
        )
        return bool(rows)

    async def queue_depth(self) -> int:
        """Return how many runs are pending."""
        rows = await self._fetch("SELECT count(*) AS n FROM runs WHERE status = 'pending'")
        return int(rows[0]["n"])

    async def sweep(self, max_attempts: int) -> Sweep:
        """Return runs whose lease expired to the queue, or end those out of attempts.

        A run out of attempts (`engine.records.out_of_attempts`) ends with an `error`
        (RunAbandoned) and an `end` frame, numbered after its last frame, in the same
        transaction as its status; the caller publishes the returned frames after the commit.
        """
        result = Sweep([], {})
        async with self._pool.connection() as conn, conn.transaction():
            expired = await (
                await conn.execute(
                    "SELECT run_id, thread_id, attempt FROM runs WHERE status = 'running' "
                    "AND lease_expires_at < now() ORDER BY seq FOR UPDATE SKIP LOCKED"
                )
            ).fetchall()
            for row in expired:
                run_id = row["run_id"]
                if not out_of_attempts(row["attempt"], max_attempts):
                    await conn.execute(
                        "UPDATE runs SET status = 'pending', lease_owner = NULL, "
                        "lease_expires_at = NULL, updated_at = now() WHERE run_id = %s",
                        (run_id,),
                    )
                    result.requeued.append(run_id)
                    continue
                result.abandoned[run_id] = await self._abandon(conn, row)
        for run_id in result.requeued:
            log.warning("run %s: its lease expired; back in the queue", run_id)
        for run_id in result.abandoned:
            log.warning("run %s: its lease expired after its last attempt; ended", run_id)
        return result

    @staticmethod
    async def _queue_webhook(
        conn: AsyncConnection[DictRow], run_id: str, error: dict[str, Any]
    ) -> None:
        """Queue the webhook delivery of a run the sweep ends, in the sweep's transaction."""
        found = await (
            await conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
        ).fetchone()
        if found is None:
            return
        queued = queued_delivery(run_from_row(found, stamp), status="error", error=error)
        if queued is not None:
            await conn.execute(*webhook_queued_statement(queued))

    @staticmethod
    async def _abandon(conn: AsyncConnection[DictRow], row: DictRow) -> list[Frame]:
        run_id, attempt = row["run_id"], row["attempt"]
        last = await (
            await conn.execute(
                "SELECT coalesce(max(seq), 0) AS last FROM run_events WHERE run_id = %s",
                (run_id,),
            )
        ).fetchone()
        next_id = int(last["last"]) + 1 if last is not None else 1
        error = {
            "error": "RunAbandoned",
            "message": f"the run's worker stopped during each of its {attempt} attempts",
        }
        frames = [
            Frame(next_id, "error", dumps(error)),
            Frame(next_id + 1, "end", dumps({"run_id": run_id, "status": "error"})),
        ]
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO run_events (run_id, seq, event, data) VALUES (%s, %s, %s, %s)",
                [(run_id, f.id, f.event, f.data) for f in frames],
            )
        sql, params = run_status_statement(RunStatusChange(run_id, "error", error=error))
        await conn.execute(sql, params)
        await PostgresRunRepository._queue_webhook(conn, run_id, error)
        # Its calls were made, unmetered: its usage is unknown (never 0).
        await conn.execute(
            "INSERT INTO run_usage (run_id, owner, assistant_id, created_at) "
            "SELECT run_id, owner, assistant_id, created_at FROM runs WHERE run_id = %s "
            "ON CONFLICT (run_id) DO NOTHING",
            (run_id,),
        )
        await conn.execute(
            "UPDATE threads SET status = 'error', updated_at = now() WHERE thread_id = %s "
            "AND NOT EXISTS (SELECT 1 FROM runs WHERE thread_id = %s "
            "AND status IN ('pending', 'running'))",
            (row["thread_id"], row["thread_id"]),
        )
        return frames
