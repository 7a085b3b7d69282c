"""Quotas and usage in the embedded deployment's SQLite files (`engine.usage.QuotaRepository`).

The counts a creation checks run on the writer connection inside the write
transaction that inserts (SQLite has one writer: count and insert are one step);
`run_counts` is what a run's insert counts. Each run's usage is a row of
`run_usage` in `atelier.db`, written by the event log with the run's terminal status
(`run_usage_statement`). The Store's bytes are kept in `store.db`, beside LangGraph's
`store` table, in `store_item_bytes` (one row per item: the bytes of its value as
JSON), joined with `store` when summed, so items the TTL sweeper removed stop
counting. One process owns DATA_DIR, so an in-process lock per owner serialises its
Store puts, and its search rate is counted in memory (`engine.quotas.SearchWindow`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from weakref import WeakValueDictionary

import aiosqlite
from langgraph.store.sqlite.aio import AsyncSqliteStore

from engine.quotas import Limits, RunCounts, SearchWindow, month_start, rate_cutoff
from engine.records import RunUsageRecorded, now
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.threads import Statement
from engine.usage import Holdings, UsageTotals

_LEDGER = """
CREATE TABLE IF NOT EXISTS store_item_bytes (
    prefix  TEXT NOT NULL,
    key     TEXT NOT NULL,
    owner   TEXT NOT NULL,
    bytes   INTEGER NOT NULL,
    PRIMARY KEY (prefix, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS store_item_bytes_owner ON store_item_bytes (owner);
"""
#: Runs created in the window, deleted ones too (their usage rows keep their creation).
_RECENT = """
SELECT created_at FROM (
    SELECT run_id, created_at FROM runs WHERE owner = ? AND created_at > ?
    UNION
    SELECT run_id, created_at FROM run_usage WHERE owner = ? AND created_at > ?
) ORDER BY created_at
"""


def run_usage_statement(change: RunUsageRecorded) -> Statement:
    """Return the statement that records a run's usage (once per run; a repeat replaces it)."""
    usage = change.usage
    return (
        "INSERT OR REPLACE INTO run_usage (run_id, owner, assistant_id, created_at, ended_at, "
        "calls, prompt_tokens, completion_tokens, cost, currency) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            change.run_id,
            change.owner,
            change.assistant_id,
            change.created_at,
            now(),
            usage.calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost,
            usage.currency,
        ),
    )


async def run_counts(
    db: aiosqlite.Connection, owner: str, limits: Limits, at: datetime
) -> RunCounts:
    """Count what a new run of `owner` is checked against, inside the insert's transaction."""
    active = recent = 0
    frees_at: datetime | None = None
    spent = 0.0
    if limits.runs_at_once is not None:
        active = int(
            await _scalar(
                db,
                "SELECT count(*) FROM runs WHERE owner = ? AND status IN ('pending', 'running')",
                (owner,),
            )
        )
    if limits.runs_per_minute is not None:
        cutoff = rate_cutoff(at).isoformat()
        created = [row[0] for row in await db.execute_fetchall(_RECENT, (owner, cutoff) * 2)]
        recent = len(created)
        if recent >= limits.runs_per_minute > 0:
            frees_at = datetime.fromisoformat(created[recent - limits.runs_per_minute])
    if limits.monthly_spend is not None:
        spent = float(
            await _scalar(
                db,
                "SELECT coalesce(sum(cost), 0) FROM run_usage WHERE owner = ? AND ended_at >= ? "
                "AND cost IS NOT NULL AND currency = ?",
                (owner, month_start(at).isoformat(), limits.currency),
            )
        )
    return RunCounts(active=active, recent=recent, frees_at=frees_at, spent=spent)


async def count_owned(db: aiosqlite.Connection, table: str, owner: str) -> int:
    """Return how many rows of `table` (crons, assistants) the owner has (in a transaction)."""
    assert table in ("crons", "assistants")
    return int(await _scalar(db, f"SELECT count(*) FROM {table} WHERE owner = ?", (owner,)))


async def _scalar(db: aiosqlite.Connection, sql: str, params: Sequence[object]) -> Any:
    """Return the one value a query answers."""
    async with db.execute(sql, params) as cursor:
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


class SqliteQuotas:
    """Usage reports and the Store's accounting, embedded (see the module docstring)."""

    def __init__(
        self,
        db: SqliteDatabase,
        store: AsyncSqliteStore,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Read runs and usage from `db`; keep the Store's bytes beside `store`'s table.

        The minute searches are counted in is read on `clock`.
        """
        self._db = db
        self._store = store
        self._holds: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._searches = SearchWindow(clock)

    async def setup(self) -> None:
        """Create the Store's byte ledger in the store's file (idempotent)."""
        async with self._store.lock:
            await self._store.conn.executescript(_LEDGER)

    async def month(
        self, owner: str, since: datetime, currency: str
    ) -> list[tuple[str, UsageTotals]]:
        """Return the usage of the owner's runs that ended since `since`, by assistant id."""
        rows = await self._db.read(
            "SELECT assistant_id, count(*) AS runs, sum(calls) AS calls, "
            "sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, "
            "coalesce(sum(CASE WHEN cost IS NOT NULL AND currency = ? THEN cost END), 0) "
            "AS known_cost, "
            "sum(CASE WHEN cost IS NULL OR currency IS NOT ? THEN 1 ELSE 0 END) AS unknown "
            "FROM run_usage WHERE owner = ? AND ended_at >= ? "
            "GROUP BY assistant_id ORDER BY assistant_id",
            (currency, currency, owner, since.isoformat()),
        )
        return [
            (
                row["assistant_id"],
                UsageTotals(
                    runs=row["runs"],
                    calls=row["calls"],
                    prompt_tokens=row["prompt_tokens"],
                    completion_tokens=row["completion_tokens"],
                    known_cost=float(row["known_cost"]),
                    unknown_cost_runs=row["unknown"],
                ),
            )
            for row in rows
        ]

    async def holdings(self, owner: str, now: datetime) -> Holdings:
        """Return what the owner holds now (runs, crons, assistants, Store bytes)."""
        cutoff = rate_cutoff(now).isoformat()
        rows = await self._db.read(
            "SELECT (SELECT count(*) FROM runs WHERE owner = ? "
            "AND status IN ('pending', 'running')) AS active, "
            f"(SELECT count(*) FROM ({_RECENT})) AS recent, "
            "(SELECT count(*) FROM crons WHERE owner = ?) AS crons, "
            "(SELECT count(*) FROM assistants WHERE owner = ?) AS assistants",
            (owner, owner, cutoff, owner, cutoff, owner, owner),
        )
        row = rows[0]
        return Holdings(
            runs_at_once=row["active"],
            runs_per_minute=row["recent"],
            crons=row["crons"],
            assistants=row["assistants"],
            store_bytes=await self.store_bytes(owner),
        )

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        """Hold the owner's Store accounting (this process is DATA_DIR's only one)."""
        lock = self._holds.get(owner)
        if lock is None:
            lock = self._holds[owner] = asyncio.Lock()
        async with lock:
            yield

    async def store_bytes(self, owner: str, excluding: Sequence[tuple[str, str]] = ()) -> int:
        """Return the bytes of the owner's Store items, but those named (prefix, key)."""
        total = await self._sum(owner, ())
        return total - await self._sum(owner, excluding) if excluding else total

    async def _sum(self, owner: str, only: Sequence[tuple[str, str]]) -> int:
        sql = (
            "SELECT coalesce(sum(b.bytes), 0) FROM store_item_bytes b "
            "JOIN store s ON s.prefix = b.prefix AND s.key = b.key WHERE b.owner = ?"
        )
        params: list[object] = [owner]
        if only:
            sql += " AND (" + " OR ".join("(b.prefix = ? AND b.key = ?)" for _ in only) + ")"
            params += [part for pair in only for part in pair]
        async with self._store.lock, self._store.conn.execute(sql, params) as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row is not None else 0

    async def store_written(
        self, owner: str, writes: Sequence[tuple[str, str, int | None]]
    ) -> None:
        """Record Store writes: (prefix, key, bytes of the new value, or None: deleted)."""
        if not writes:
            return
        async with self._store.lock:
            conn = self._store.conn  # autocommit: the writes are one transaction of their own
            await conn.execute("BEGIN IMMEDIATE")
            try:
                for prefix, key, size in writes:
                    if size is None:
                        await conn.execute(
                            "DELETE FROM store_item_bytes WHERE prefix = ? AND key = ?",
                            (prefix, key),
                        )
                    else:
                        await conn.execute(
                            "INSERT OR REPLACE INTO store_item_bytes (prefix, key, owner, bytes) "
                            "VALUES (?, ?, ?, ?)",
                            (prefix, key, owner, size),
                        )
                await conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                raise

    async def admit_search(self, owner: str, limit: int | None) -> None:
        """Count a Store search of the owner in this process; refuse it over `limit`."""
        self._searches.admit(owner, limit)


__all__ = ["SqliteQuotas", "count_owned", "run_counts", "run_usage_statement"]
