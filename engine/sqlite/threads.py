"""Threads in the run engine's SQLite database (`ThreadRepository`).

A thread's TTL (`engine.retention`) is kept in its row: `expires_at` in Unix seconds,
moved on by every status change a run records (`thread_state_statement`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from engine.protocols import ThreadExists
from engine.records import ThreadRecord, ThreadStateChange, ThreadStatus, ThreadTTL, now
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase

Statement = tuple[str, Sequence[Any]]


#: Moves a TTL's expiry on to `minutes` from now (the parameter: now, Unix seconds).
REARM = "expires_at = CASE WHEN ttl_minutes IS NULL THEN NULL ELSE ? + ttl_minutes * 60 END"


def unix(moment: str | datetime) -> float:
    """Return an ISO 8601 time (or a datetime) as Unix seconds."""
    value = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return value.timestamp()


def ttl_from_row(row: sqlite3.Row) -> ThreadTTL | None:
    """Return the TTL a `threads` row holds, or None."""
    if row["ttl_strategy"] is None or row["ttl_minutes"] is None:
        return None
    expires = row["expires_at"]
    shown = None if expires is None else datetime.fromtimestamp(expires, UTC).isoformat()
    return ThreadTTL(row["ttl_strategy"], float(row["ttl_minutes"]), shown)


def ttl_columns(ttl: ThreadTTL | None) -> tuple[str | None, float | None, float | None]:
    """Return the (strategy, minutes, expiry) columns of a TTL (counted from now if unset)."""
    if ttl is None:
        return None, None, None
    stored = ttl.stored()
    return stored.strategy, stored.minutes, unix(stored.expires_at or "")


def thread_from_row(row: sqlite3.Row) -> ThreadRecord:
    """Return the thread a `threads` row holds."""
    return ThreadRecord(
        thread_id=row["thread_id"],
        owner=row["owner"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        metadata=loads(row["metadata"]) or {},
        status=row["status"],
        values=loads(row["state"]),
        interrupts=loads(row["interrupts"]) or {},
        ttl=ttl_from_row(row),
    )


def thread_state_statement(change: ThreadStateChange) -> Statement:
    """Return the statement that records a thread's status (and state, when given).

    A run's start and end are activity: a thread's TTL counts again from now.
    """
    if change.values is None:
        return (
            f"UPDATE threads SET status = ?, updated_at = ?, {REARM} WHERE thread_id = ?",
            (change.status, now(), time.time(), change.thread_id),
        )
    return (
        f"UPDATE threads SET status = ?, state = ?, interrupts = ?, updated_at = ?, {REARM} "
        "WHERE thread_id = ?",
        (
            change.status,
            dumps(change.values),
            dumps(change.interrupts or {}),
            now(),
            time.time(),
            change.thread_id,
        ),
    )


async def insert_thread(db: aiosqlite.Connection, thread: ThreadRecord) -> None:
    """Insert a thread inside a write transaction; raise `ThreadExists` when the id is taken."""
    try:
        await db.execute(
            "INSERT INTO threads (thread_id, owner, created_at, updated_at, metadata, status, "
            "state, interrupts, ttl_strategy, ttl_minutes, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                thread.thread_id,
                thread.owner,
                thread.created_at,
                thread.updated_at,
                dumps(thread.metadata),
                thread.status,
                None if thread.values is None else dumps(thread.values),
                dumps(thread.interrupts),
                *ttl_columns(thread.ttl),
            ),
        )
    except sqlite3.IntegrityError:
        raise ThreadExists(f"thread {thread.thread_id!r} already exists") from None


def _filters(
    owner: str,
    metadata: dict[str, Any] | None,
    status: ThreadStatus | None,
    ids: Sequence[str] | None,
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a thread search."""
    where = ["owner = ?"]
    params: list[Any] = [owner]
    for key, value in (metadata or {}).items():
        where.append("json_extract(metadata, ?) IS json_extract(?, '$')")
        params += [f'$."{key}"', dumps(value)]
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if ids is not None:
        where.append(f"thread_id IN ({', '.join('?' for _ in ids)})")
        params += list(ids)
    return " AND ".join(where), params


class SqliteThreadRepository:
    """Threads in SQLite (see `engine.protocols.ThreadRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def get(self, owner: str, thread_id: str) -> ThreadRecord | None:
        """Return the owner's thread, or None (also when another owner has it)."""
        rows = await self._db.read(
            "SELECT * FROM threads WHERE thread_id = ? AND owner = ?", (thread_id, owner)
        )
        return thread_from_row(rows[0]) if rows else None

    async def exists(self, thread_id: str) -> bool:
        """Return whether any owner has a thread with this id."""
        return bool(await self._db.read("SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,)))

    async def insert(self, thread: ThreadRecord) -> None:
        """Store a new thread (raises `ThreadExists` when the id is taken)."""
        async with self._db.transaction() as db:
            await insert_thread(db, thread)

    async def merge_metadata(
        self, owner: str, thread_id: str, metadata: dict[str, Any], ttl: ThreadTTL | None = None
    ) -> ThreadRecord | None:
        """Merge keys into the owner's thread's metadata; return the thread, or None.

        The read and the write share one write transaction (the database's write lock),
        so concurrent merges into one thread all land. With `ttl`, the thread's TTL is
        replaced (counted from its `expires_at`, or now) and a sweep's claim on it void.
        """
        async with self._db.transaction() as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT * FROM threads WHERE thread_id = ? AND owner = ?", (thread_id, owner)
                )
            )
            if not rows:
                return None
            thread = thread_from_row(rows[0])
            thread.metadata = {**thread.metadata, **metadata}
            thread.updated_at = now()
            await db.execute(
                "UPDATE threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
                (dumps(thread.metadata), thread.updated_at, thread_id),
            )
            if ttl is not None:
                thread.ttl = ttl.stored()
                await db.execute(
                    "UPDATE threads SET ttl_strategy = ?, ttl_minutes = ?, expires_at = ?, "
                    "sweep_owner = NULL, sweep_until = NULL WHERE thread_id = ?",
                    (*ttl_columns(thread.ttl), thread_id),
                )
        return thread

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
            f"SELECT * FROM threads WHERE {where} "
            f"ORDER BY {column} {order}, rowid {order} LIMIT ? OFFSET ?"
        )
        return [thread_from_row(row) for row in await self._db.read(sql, [*params, limit, offset])]

    async def count(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
    ) -> int:
        """Return how many of the owner's threads match every given filter."""
        where, params = _filters(owner, metadata, status, None)
        rows = await self._db.read(f"SELECT count(*) FROM threads WHERE {where}", params)
        return int(rows[0][0])

    async def delete(self, thread_id: str) -> None:
        """Delete a thread with its runs and their event logs (checkpoints are the saver's)."""
        async with self._db.transaction() as db:
            await db.execute(
                "DELETE FROM run_events WHERE run_id IN "
                "(SELECT run_id FROM runs WHERE thread_id = ?)",
                (thread_id,),
            )
            await db.execute("DELETE FROM runs WHERE thread_id = ?", (thread_id,))
            await db.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,))
