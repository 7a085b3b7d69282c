"""Quotas and usage in PostgreSQL, across every replica (`engine.usage.QuotaRepository`).

A creation that a quota limits counts the owner's rows and inserts in one
transaction that first takes the owner's advisory lock for that kind of thing
(`lock_owner`: `pg_advisory_xact_lock`, released at commit or rollback): every
replica's count-and-insert for the owner takes its turn, so two replicas cannot
both admit the last run of a minute. What is counted is in the database: runs
pending or running, runs created in the last 60 s (with `run_usage`, so a run
deleted since still counts), this month's known cost in `run_usage` (schema v9,
`engine.postgres.migrations`).

The Store's bytes are in `store_item_bytes` beside LangGraph's `store` table (one
row per item, joined with `store` when summed, so swept items stop counting); a
put holds the owner's lock on a connection of its own while it checks, writes the
item (through LangGraph's store) and records its bytes. Store searches are counted
per owner and calendar minute in `quota_windows` (one upsert).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from engine.postgres.pool import AsyncPool
from engine.postgres.threads import Statement
from engine.quotas import Limits, RunCounts, check_searches, minute_of, month_start, rate_cutoff
from engine.records import RunUsageRecorded
from engine.usage import Holdings, UsageTotals

#: The advisory lock space of quotas ("QUOT"); the second key is the owner's hash.
QUOTA_LOCK = 0x51554F54
#: Runs created in the window, deleted ones too (their usage rows keep their creation).
_RECENT = """
SELECT created_at FROM runs WHERE owner = %(owner)s AND created_at > %(cutoff)s
UNION
SELECT created_at FROM run_usage WHERE owner = %(owner)s AND created_at > %(cutoff)s
"""
_SUMMED = (
    "SELECT coalesce(sum(b.bytes), 0) AS bytes FROM store_item_bytes b "
    "JOIN store s ON s.prefix = b.prefix AND s.key = b.key WHERE b.owner = %s"
)


async def lock_owner(conn: AsyncConnection[DictRow], kind: str, owner: str) -> None:
    """Take the owner's lock for `kind` (runs, crons, assistants, store) until the commit."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (QUOTA_LOCK, f"{kind}:{owner}")
    )


def run_usage_statement(change: RunUsageRecorded) -> Statement:
    """Return the statement that records a run's usage (once per run; a repeat replaces it)."""
    usage = change.usage
    return (
        "INSERT INTO run_usage (run_id, owner, assistant_id, created_at, ended_at, calls, "
        "prompt_tokens, completion_tokens, cost, currency) "
        "VALUES (%s, %s, %s, %s::timestamptz, now(), %s, %s, %s, %s, %s) "
        "ON CONFLICT (run_id) DO UPDATE SET ended_at = now(), calls = excluded.calls, "
        "prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, "
        "cost = excluded.cost, currency = excluded.currency",
        (
            change.run_id,
            change.owner,
            change.assistant_id,
            change.created_at,
            usage.calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost,
            usage.currency,
        ),
    )


async def run_counts(
    conn: AsyncConnection[DictRow], owner: str, limits: Limits, at: datetime
) -> RunCounts:
    """Lock the owner's runs and count what a new run is checked against (in its transaction)."""
    await lock_owner(conn, "runs", owner)
    active = recent = 0
    frees_at: datetime | None = None
    spent = 0.0
    if limits.runs_at_once is not None:
        row = await (
            await conn.execute(
                "SELECT count(*) AS n FROM runs WHERE owner = %s "
                "AND status IN ('pending', 'running')",
                (owner,),
            )
        ).fetchone()
        active = int(row["n"]) if row is not None else 0
    if limits.runs_per_minute is not None:
        rows = await (
            await conn.execute(
                f"SELECT created_at FROM ({_RECENT}) r ORDER BY created_at",
                {"owner": owner, "cutoff": rate_cutoff(at)},
            )
        ).fetchall()
        recent = len(rows)
        if recent >= limits.runs_per_minute > 0:
            frees_at = rows[recent - limits.runs_per_minute]["created_at"]
    if limits.monthly_spend is not None:
        row = await (
            await conn.execute(
                "SELECT coalesce(sum(cost), 0) AS spent FROM run_usage WHERE owner = %s "
                "AND ended_at >= %s AND cost IS NOT NULL AND currency = %s",
                (owner, month_start(at), limits.currency),
            )
        ).fetchone()
        spent = float(row["spent"]) if row is not None else 0.0
    return RunCounts(active=active, recent=recent, frees_at=frees_at, spent=spent)


async def count_owned(conn: AsyncConnection[DictRow], table: str, owner: str) -> int:
    """Lock the owner's `table` (crons, assistants) and count its rows (in a transaction)."""
    assert table in ("crons", "assistants")
    await lock_owner(conn, table, owner)
    row = await (
        await conn.execute(f"SELECT count(*) AS n FROM {table} WHERE owner = %s", (owner,))
    ).fetchone()
    return int(row["n"]) if row is not None else 0


class PostgresQuotas:
    """Usage reports and the Store's accounting, shared by every replica (module docstring)."""

    def __init__(
        self, pool: AsyncPool, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        """Borrow connections from the process's pool; read the minute of searches on `clock`."""
        self._pool = pool
        self._clock = clock

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def month(
        self, owner: str, since: datetime, currency: str
    ) -> list[tuple[str, UsageTotals]]:
        """Return the usage of the owner's runs that ended since `since`, by assistant id."""
        rows = await self._fetch(
            "SELECT assistant_id, count(*) AS runs, sum(calls) AS calls, "
            "sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, "
            "coalesce(sum(cost) FILTER (WHERE cost IS NOT NULL AND currency = %(currency)s), 0) "
            "AS known_cost, "
            "count(*) FILTER (WHERE cost IS NULL OR currency IS DISTINCT FROM %(currency)s) "
            "AS unknown "
            "FROM run_usage WHERE owner = %(owner)s AND ended_at >= %(since)s "
            "GROUP BY assistant_id ORDER BY assistant_id",
            {"currency": currency, "owner": owner, "since": since},
        )
        return [
            (
                row["assistant_id"],
                UsageTotals(
                    runs=int(row["runs"]),
                    calls=None if row["calls"] is None else int(row["calls"]),
                    prompt_tokens=None
                    if row["prompt_tokens"] is None
                    else int(row["prompt_tokens"]),
                    completion_tokens=None
                    if row["completion_tokens"] is None
                    else int(row["completion_tokens"]),
                    known_cost=float(row["known_cost"]),
                    unknown_cost_runs=int(row["unknown"]),
                ),
            )
            for row in rows
        ]

    async def holdings(self, owner: str, now: datetime) -> Holdings:
        """Return what the owner holds now (runs, crons, assistants, Store bytes)."""
        rows = await self._fetch(
            "SELECT (SELECT count(*) FROM runs WHERE owner = %(owner)s "
            "AND status IN ('pending', 'running')) AS active, "
            f"(SELECT count(*) FROM ({_RECENT}) r) AS recent, "
            "(SELECT count(*) FROM crons WHERE owner = %(owner)s) AS crons, "
            "(SELECT count(*) FROM assistants WHERE owner = %(owner)s) AS assistants",
            {"owner": owner, "cutoff": rate_cutoff(now)},
        )
        row = rows[0]
        return Holdings(
            runs_at_once=int(row["active"]),
            runs_per_minute=int(row["recent"]),
            crons=int(row["crons"]),
            assistants=int(row["assistants"]),
            store_bytes=await self.store_bytes(owner),
        )

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        """Hold the owner's Store lock (every replica's) on a connection of its own."""
        async with self._pool.connection() as conn, conn.transaction():
            await lock_owner(conn, "store", owner)
            yield

    async def store_bytes(self, owner: str, excluding: Sequence[tuple[str, str]] = ()) -> int:
        """Return the bytes of the owner's Store items, but those named (prefix, key)."""
        sql = _SUMMED
        params: list[Any] = [owner]
        if excluding:
            sql += " AND (b.prefix, b.key) NOT IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
            params += [[p for p, _ in excluding], [k for _, k in excluding]]
        rows = await self._fetch(sql, params)
        return int(rows[0]["bytes"])

    async def store_written(
        self, owner: str, writes: Sequence[tuple[str, str, int | None]]
    ) -> None:
        """Record Store writes: (prefix, key, bytes of the new value, or None: deleted)."""
        if not writes:
            return
        async with self._pool.connection() as conn, conn.transaction():
            for prefix, key, size in writes:
                if size is None:
                    await conn.execute(
                        "DELETE FROM store_item_bytes WHERE prefix = %s AND key = %s",
                        (prefix, key),
                    )
                else:
                    await conn.execute(
                        "INSERT INTO store_item_bytes (prefix, key, owner, bytes) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (prefix, key) "
                        "DO UPDATE SET owner = excluded.owner, bytes = excluded.bytes",
                        (prefix, key, owner, size),
                    )

    async def admit_search(self, owner: str, limit: int | None) -> None:
        """Count a Store search of the owner in this calendar minute; refuse it over `limit`.

        A refused search is counted too (it was asked for); the window's row goes when
        the owner's first search of a later minute is counted.
        """
        if limit is None:
            return
        minute, left = minute_of(self._clock())
        rows = await self._fetch(
            "INSERT INTO quota_windows (owner, kind, window_start, count) "
            "VALUES (%s, 'store_search', %s, 1) ON CONFLICT (owner, kind, window_start) "
            "DO UPDATE SET count = quota_windows.count + 1 RETURNING count",
            (owner, minute),
        )
        count = int(rows[0]["count"])
        if count == 1:  # the owner's first search of this minute: drop its older windows
            async with self._pool.connection() as conn:
                await conn.execute(
                    "DELETE FROM quota_windows WHERE owner = %s AND kind = 'store_search' "
                    "AND window_start < %s",
                    (owner, minute),
                )
        check_searches(limit, count, left)


__all__ = ["PostgresQuotas", "count_owned", "lock_owner", "run_counts", "run_usage_statement"]
