"""Threads in the scale-out backend's PostgreSQL database (`ThreadRepository`).

A thread's TTL (`engine.retention`) is kept in its row (schema v10), `expires_at`
moved on by every status change a run records (`thread_state_statement`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.postgres.pool import AsyncPool
from engine.protocols import ThreadExists
from engine.records import ThreadRecord, ThreadStateChange, ThreadStatus, ThreadTTL
from engine.serde import dumps, loads

#: A statement and its parameters (positional `%s`, or named `%(name)s`).
Statement = tuple[str, Sequence[Any] | Mapping[str, Any]]

THREAD_COLUMNS = (
    "thread_id, owner, created_at, updated_at, metadata, status, state, interrupts, "
    "ttl_strategy, ttl_minutes, expires_at"
)
#: Moves a TTL's expiry on to `minutes` from now.
REARM = (
    "expires_at = CASE WHEN ttl_minutes IS NULL THEN NULL "
    "ELSE now() + make_interval(secs => ttl_minutes * 60) END"
)


def stamp(value: datetime | None) -> str | None:
    """Return a `timestamptz` as the records' ISO 8601 UTC text (sortable as text)."""
    return None if value is None else value.astimezone(UTC).isoformat()


def thread_from_row(row: DictRow) -> ThreadRecord:
    """Return the thread a `threads` row holds."""
    return ThreadRecord(
        thread_id=row["thread_id"],
        owner=row["owner"],
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
        metadata=row["metadata"] or {},
        status=row["status"],
        values=loads(row["state"]),
        interrupts=loads(row["interrupts"]) or {},
        ttl=ttl_from_row(row),
    )


def ttl_from_row(row: DictRow) -> ThreadTTL | None:
    """Return the TTL a `threads` row holds, or None."""
    if row["ttl_strategy"] is None or row["ttl_minutes"] is None:
        return None
    return ThreadTTL(row["ttl_strategy"], float(row["ttl_minutes"]), stamp(row["expires_at"]))


def ttl_columns(ttl: ThreadTTL | None) -> tuple[str | None, float | None, str | None]:
    """Return the (strategy, minutes, expiry) columns of a TTL (counted from now if unset)."""
    if ttl is None:
        return None, None, None
    stored = ttl.stored()
    return stored.strategy, stored.minutes, stored.expires_at


def thread_state_statement(change: ThreadStateChange) -> Statement:
    """Return the statement that records a thread's status (and state, when given).

    A run's start and end are activity: a thread's TTL counts again from now.
    """
    if change.values is None:
        return (
            f"UPDATE threads SET status = %s, updated_at = now(), {REARM} WHERE thread_id = %s",
            (change.status, change.thread_id),
        )
    return (
        "UPDATE threads SET status = %s, state = %s, interrupts = %s, updated_at = now(), "
        f"{REARM} WHERE thread_id = %s",
        (change.status, dumps(change.values), dumps(change.interrupts or {}), change.thread_id),
    )


async def insert_thread(conn: AsyncConnection[DictRow], thread: ThreadRecord) -> None:
    """Insert a thread inside a transaction; raise `ThreadExists` when the id is taken."""
    try:
        async with conn.transaction():  # a savepoint: the caller's transaction survives
            await conn.execute(
                f"INSERT INTO threads ({THREAD_COLUMNS}) "
                "VALUES (%s, %s, %s::timestamptz, %s::timestamptz, %s, %s, %s, %s, %s, %s, "
                "%s::timestamptz)",
                (
                    thread.thread_id,
                    thread.owner,
                    thread.created_at,
                    thread.updated_at,
                    Jsonb(thread.metadata),
                    thread.status,
                    None if thread.values is None else dumps(thread.values),
                    dumps(thread.interrupts),
                    *ttl_columns(thread.ttl),
                ),
            )
    except psycopg.errors.UniqueViolation:
        raise ThreadExists(f"thread {thread.thread_id!r} already exists") from None


def _filters(
    owner: str,
    metadata: dict[str, Any] | None,
    status: ThreadStatus | None,
    ids: Sequence[str] | None,
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a thread search."""
    where = ["owner = %s"]
    params: list[Any] = [owner]
    for key, value in (metadata or {}).items():
        if value is None:  # as SQLite's json_extract: a JSON null or no key at all
            where.append("coalesce(jsonb_typeof(metadata -> %s), 'null') = 'null'")
            params.append(key)
        else:
            where.append("metadata -> %s = %s")
            params += [key, Jsonb(value)]
    if status is not None:
        where.append("status = %s")
        params.append(status)
    if ids is not None:
        where.append("thread_id = ANY(%s)")
        params.append(list(ids))
    return " AND ".join(where), params


class PostgresThreadRepository:
    """Threads in PostgreSQL (see `engine.protocols.ThreadRepository`)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def get(self, owner: str, thread_id: str) -> ThreadRecord | None:
        """Return the owner's thread, or None (also when another owner has it)."""
        rows = await self._fetch(
            f"SELECT {THREAD_COLUMNS} FROM threads WHERE thread_id = %s AND owner = %s",
            (thread_id, owner),
        )
        return thread_from_row(rows[0]) if rows else None

    async def exists(self, thread_id: str) -> bool:
        """Return whether any owner has a thread with this id."""
        rows = await self._fetch("SELECT 1 AS one FROM threads WHERE thread_id = %s", (thread_id,))
        return bool(rows)

    async def insert(self, thread: ThreadRecord) -> None:
        """Store a new thread (raises `ThreadExists` when the id is taken)."""
        async with self._pool.connection() as conn, conn.transaction():
            await insert_thread(conn, thread)

    async def merge_metadata(
        self, owner: str, thread_id: str, metadata: dict[str, Any], ttl: ThreadTTL | None = None
    ) -> ThreadRecord | None:
        """Merge keys into the owner's thread's metadata; return the thread, or None.

        One statement (`jsonb ||` merges the top-level keys), so concurrent merges into
        one thread all land. With `ttl`, the thread's TTL is replaced (counted from its
        `expires_at`, or now) and a sweep's claim on it void.
        """
        if ttl is None:
            rows = await self._fetch(
                "UPDATE threads SET metadata = metadata || %s, updated_at = now() "
                f"WHERE thread_id = %s AND owner = %s RETURNING {THREAD_COLUMNS}",
                (Jsonb(metadata), thread_id, owner),
            )
        else:
            rows = await self._fetch(
                "UPDATE threads SET metadata = metadata || %s, updated_at = now(), "
                "ttl_strategy = %s, ttl_minutes = %s, expires_at = %s::timestamptz, "
                "sweep_owner = NULL, sweep_until = NULL "
                f"WHERE thread_id = %s AND owner = %s RETURNING {THREAD_COLUMNS}",
                (Jsonb(metadata), *ttl_columns(ttl), thread_id, owner),
            )
        return thread_from_row(rows[0]) if rows else None

    async def search(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
        ids: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[ThreadRecord]:
        """Return the owner's threads matching every given filter (limit -1: all)."""
        where, params = _filters(owner, metadata, status, ids)
        column = {"thread_id": "thread_id", "status": "status", "updated_at": "updated_at"}.get(
            sort_by, "created_at"
        )
        order = "ASC" if sort_order == "asc" else "DESC"
        sql = (
            f"SELECT {THREAD_COLUMNS} FROM threads WHERE {where} "
            f"ORDER BY {column} {order}, thread_id {order} LIMIT %s OFFSET %s"
        )
        rows = await self._fetch(sql, [*params, None if limit < 0 else limit, offset])
        return [thread_from_row(row) for row in rows]

    async def count(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
    ) -> int:
        """Return how many of the owner's threads match every given filter."""
        where, params = _filters(owner, metadata, status, None)
        rows = await self._fetch(f"SELECT count(*) AS n FROM threads WHERE {where}", params)
        return int(rows[0]["n"])

    async def delete(self, thread_id: str) -> None:
        """Delete a thread with its runs and their event logs (checkpoints are the saver's)."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM run_events WHERE run_id IN "
                "(SELECT run_id FROM runs WHERE thread_id = %s)",
                (thread_id,),
            )
            await conn.execute("DELETE FROM runs WHERE thread_id = %s", (thread_id,))
            await conn.execute("DELETE FROM threads WHERE thread_id = %s", (thread_id,))
