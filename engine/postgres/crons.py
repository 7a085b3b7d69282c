"""Crons in PostgreSQL (`CronRepository`), fired exactly once by any number of processes.

Every API replica runs a scheduler (`engine.crons.CronScheduler`). `claim_due` opens a
transaction and locks the earliest due cron with `SELECT … FOR UPDATE SKIP LOCKED`: the
other processes skip that row (and claim the next due one, if any). `fire` records the
tick's run and moves `next_run_at` on in that same transaction, so the tick's run and
the end of its tick commit together. A process killed while it holds a cron commits
nothing; its lock goes with its connection and another process fires the tick.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.crons import CronRecord
from engine.postgres.pool import AsyncPool
from engine.postgres.quotas import count_owned
from engine.postgres.runs import insert_run
from engine.postgres.threads import stamp
from engine.quotas import Limits, QuotaExceeded, check_count
from engine.records import RunRecord, ThreadRecord

_COLUMNS = (
    "cron_id, owner, assistant_id, thread_id, schedule, timezone, payload, metadata, "
    "on_run_completed, end_time, enabled, next_run_at, created_at, updated_at"
)
_SORTABLE = {"cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "end_time"}


def cron_from_row(row: DictRow) -> CronRecord:
    """Return the cron a `crons` row holds."""
    return CronRecord(
        cron_id=row["cron_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        thread_id=row["thread_id"],
        schedule=row["schedule"],
        timezone=row["timezone"],
        payload=row["payload"] or {},
        metadata=row["metadata"] or {},
        on_run_completed=row["on_run_completed"],
        end_time=stamp(row["end_time"]),
        enabled=bool(row["enabled"]),
        next_run_at=stamp(row["next_run_at"]),
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
    )


def _filters(
    owner: str,
    assistant_id: str | None,
    thread_id: str | None,
    enabled: bool | None,
    metadata: dict[str, Any] | None,
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a cron search."""
    where = ["owner = %s"]
    params: list[Any] = [owner]
    if assistant_id is not None:
        where.append("assistant_id = %s")
        params.append(assistant_id)
    if thread_id is not None:
        where.append("thread_id = %s")
        params.append(thread_id)
    if enabled is not None:
        where.append("enabled = %s")
        params.append(enabled)
    if metadata:
        where.append("metadata @> %s")
        params.append(Jsonb(metadata))
    return " AND ".join(where), params


_INSERT = (
    f"INSERT INTO crons ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s::timestamptz, %s, %s::timestamptz, %s::timestamptz, %s::timestamptz)"
)


def _insert_params(cron: CronRecord) -> tuple[Any, ...]:
    """Return the parameters of `_INSERT` for a cron."""
    return (
        cron.cron_id,
        cron.owner,
        cron.assistant_id,
        cron.thread_id,
        cron.schedule,
        cron.timezone,
        Jsonb(cron.payload),
        Jsonb(cron.metadata),
        cron.on_run_completed,
        cron.end_time,
        cron.enabled,
        cron.next_run_at,
        cron.created_at,
        cron.updated_at,
    )


class PostgresCronTick:
    """A due cron locked by this transaction (an `engine.repositories.CronTick`)."""

    def __init__(self, conn: AsyncConnection[DictRow], cron: CronRecord) -> None:
        """Fire `cron` (its row locked) on `conn`, inside the claim's transaction."""
        self._conn = conn
        self.cron = cron

    async def fire(
        self,
        next_run_at: str | None,
        run: RunRecord | None,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool = True,
        limits: Limits | None = None,
    ) -> bool:
        """Record the run (if any) and move `next_run_at` on; both commit with the claim.

        A run over its owner's `limits` is not stored (the tick is spent): the refusal
        comes before any write, so the claim's transaction goes on.
        """
        stored = False
        if run is not None:
            try:
                stored = await insert_run(
                    self._conn, run, new_thread, exclusive=exclusive, limits=limits
                )
            except QuotaExceeded:
                stored = False
        await self._conn.execute(
            "UPDATE crons SET next_run_at = %s::timestamptz WHERE cron_id = %s",
            (next_run_at, self.cron.cron_id),
        )
        return stored

    async def disable(self) -> None:
        """Disable the cron (its owner may no longer run); commits with the claim."""
        await self._conn.execute(
            "UPDATE crons SET enabled = false WHERE cron_id = %s", (self.cron.cron_id,)
        )


class PostgresCronRepository:
    """Crons in PostgreSQL (see `engine.repositories.CronRepository` and the module docstring)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def insert(self, cron: CronRecord, *, limit: int | None = None) -> None:
        """Store a new cron; with `limit`, only while its owner has fewer (every replica's)."""
        async with self._pool.connection() as conn, conn.transaction():
            if limit is not None:
                check_count("crons", limit, await count_owned(conn, "crons", cron.owner))
            await conn.execute(_INSERT, _insert_params(cron))

    async def get(self, owner: str, cron_id: str) -> CronRecord | None:
        """Return the owner's cron, or None."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM crons WHERE cron_id = %s AND owner = %s", (cron_id, owner)
        )
        return cron_from_row(rows[0]) if rows else None

    async def replace(self, cron: CronRecord, *, previous_next_run_at: str | None) -> bool:
        """Write every field of a cron but its id, owner and creation time.

        Only while its `next_run_at` is still `previous_next_run_at` (a claim's lock
        makes the write wait for the claim's commit).
        """
        rows = await self._fetch(
            "UPDATE crons SET schedule = %s, timezone = %s, payload = %s, metadata = %s, "
            "on_run_completed = %s, end_time = %s::timestamptz, enabled = %s, "
            "next_run_at = %s::timestamptz, updated_at = %s::timestamptz "
            "WHERE cron_id = %s AND owner = %s "
            "AND next_run_at IS NOT DISTINCT FROM %s::timestamptz RETURNING cron_id",
            (
                cron.schedule,
                cron.timezone,
                Jsonb(cron.payload),
                Jsonb(cron.metadata),
                cron.on_run_completed,
                cron.end_time,
                cron.enabled,
                cron.next_run_at,
                cron.updated_at,
                cron.cron_id,
                cron.owner,
                previous_next_run_at,
            ),
        )
        return bool(rows)

    async def delete(self, owner: str, cron_id: str) -> bool:
        """Delete the owner's cron; False when there is none."""
        rows = await self._fetch(
            "DELETE FROM crons WHERE cron_id = %s AND owner = %s RETURNING cron_id",
            (cron_id, owner),
        )
        return bool(rows)

    async def search(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[CronRecord]:
        """Return the owner's crons matching every given filter."""
        where, params = _filters(owner, assistant_id, thread_id, enabled, metadata)
        column = "next_run_at" if sort_by == "next_run_date" else sort_by
        if column not in _SORTABLE | {"next_run_at"}:
            raise ValueError(f"cannot sort crons by {sort_by!r}")
        order = "ASC" if sort_order == "asc" else "DESC"
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM crons WHERE {where} "
            f"ORDER BY {column} {order}, cron_id {order} LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [cron_from_row(row) for row in rows]

    async def count(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's crons match every given filter."""
        where, params = _filters(owner, assistant_id, thread_id, None, metadata)
        rows = await self._fetch(f"SELECT count(*) AS n FROM crons WHERE {where}", params)
        return int(rows[0]["n"])

    @contextlib.asynccontextmanager
    async def claim_due(self, now: str) -> AsyncIterator[PostgresCronTick | None]:
        """Lock the earliest due cron no other process holds, for the block's transaction."""
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    f"SELECT {_COLUMNS} FROM crons WHERE enabled "
                    "AND next_run_at <= %s::timestamptz ORDER BY next_run_at LIMIT 1 "
                    "FOR UPDATE SKIP LOCKED",
                    (now,),
                )
            ).fetchone()
            yield PostgresCronTick(conn, cron_from_row(row)) if row is not None else None
