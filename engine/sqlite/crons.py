"""Crons in the run engine's SQLite database (`CronRepository`).

One process owns the database (`engine.sqlite.ownership`), so its one scheduler is
the only one firing ticks. A tick still fires in one write transaction: the run's
insert and the move of `next_run_at`, only while `next_run_at` is the tick claimed,
so a process killed in between leaves either both or neither.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

from engine.crons import CronRecord
from engine.quotas import Limits, QuotaExceeded, check_count
from engine.records import RunRecord, ThreadRecord
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.quotas import count_owned
from engine.sqlite.runs import insert_run

_COLUMNS = (
    "cron_id, owner, assistant_id, thread_id, schedule, timezone, payload, metadata, "
    "on_run_completed, end_time, enabled, next_run_at, created_at, updated_at"
)
_SORTABLE = {"cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "end_time"}


def cron_from_row(row: sqlite3.Row) -> CronRecord:
    """Return the cron a `crons` row holds."""
    return CronRecord(
        cron_id=row["cron_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        thread_id=row["thread_id"],
        schedule=row["schedule"],
        timezone=row["timezone"],
        payload=loads(row["payload"]),
        metadata=loads(row["metadata"]),
        on_run_completed=row["on_run_completed"],
        end_time=row["end_time"],
        enabled=bool(row["enabled"]),
        next_run_at=row["next_run_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _filters(
    owner: str,
    assistant_id: str | None,
    thread_id: str | None,
    enabled: bool | None,
    metadata: dict[str, Any] | None,
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a cron search."""
    where = ["owner = ?"]
    params: list[Any] = [owner]
    if assistant_id is not None:
        where.append("assistant_id = ?")
        params.append(assistant_id)
    if thread_id is not None:
        where.append("thread_id = ?")
        params.append(thread_id)
    if enabled is not None:
        where.append("enabled = ?")
        params.append(int(enabled))
    for key, value in (metadata or {}).items():
        where.append("json_extract(metadata, ?) IS json_extract(?, '$')")
        params += [f'$."{key}"', dumps(value)]
    return " AND ".join(where), params


class SqliteCronTick:
    """A due cron, fired in one write transaction (an `engine.repositories.CronTick`)."""

    def __init__(self, db: SqliteDatabase, cron: CronRecord) -> None:
        """Fire `cron` (as read) in `db`."""
        self._db = db
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
        """Record the run (if any) and move `next_run_at` on, if the tick is still due.

        A run over its owner's `limits` is not stored (the tick is spent).
        """
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE crons SET next_run_at = ? WHERE cron_id = ? AND next_run_at = ?",
                (next_run_at, self.cron.cron_id, self.cron.next_run_at),
            )
            if cursor.rowcount != 1:  # updated or deleted since it was read
                return False
            if run is None:
                return False
            try:
                return await insert_run(db, run, new_thread, exclusive=exclusive, limits=limits)
            except QuotaExceeded:  # refused before anything of the run was written
                return False

    async def disable(self) -> None:
        """Disable the cron (its owner may no longer run), if the tick is still due."""
        async with self._db.transaction() as db:
            await db.execute(
                "UPDATE crons SET enabled = 0 WHERE cron_id = ? AND next_run_at = ?",
                (self.cron.cron_id, self.cron.next_run_at),
            )


class SqliteCronRepository:
    """Crons in SQLite (see `engine.repositories.CronRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(self, cron: CronRecord, *, limit: int | None = None) -> None:
        """Store a new cron; with `limit`, only while its owner has fewer (one transaction)."""
        async with self._db.transaction() as db:
            if limit is not None:
                check_count("crons", limit, await count_owned(db, "crons", cron.owner))
            await db.execute(f"INSERT INTO crons ({_COLUMNS}) VALUES ({_marks()})", _row(cron))

    async def get(self, owner: str, cron_id: str) -> CronRecord | None:
        """Return the owner's cron, or None."""
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM crons WHERE cron_id = ? AND owner = ?", (cron_id, owner)
        )
        return cron_from_row(rows[0]) if rows else None

    async def replace(self, cron: CronRecord, *, previous_next_run_at: str | None) -> bool:
        """Write every field of a cron but its id, owner and creation time.

        Only while its `next_run_at` is still `previous_next_run_at`.
        """
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE crons SET schedule = ?, timezone = ?, payload = ?, metadata = ?, "
                "on_run_completed = ?, end_time = ?, enabled = ?, next_run_at = ?, "
                "updated_at = ? WHERE cron_id = ? AND owner = ? AND next_run_at IS ?",
                (
                    cron.schedule,
                    cron.timezone,
                    dumps(cron.payload),
                    dumps(cron.metadata),
                    cron.on_run_completed,
                    cron.end_time,
                    int(cron.enabled),
                    cron.next_run_at,
                    cron.updated_at,
                    cron.cron_id,
                    cron.owner,
                    previous_next_run_at,
                ),
            )
            return cursor.rowcount == 1

    async def delete(self, owner: str, cron_id: str) -> bool:
        """Delete the owner's cron; False when there is none."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM crons WHERE cron_id = ? AND owner = ?", (cron_id, owner)
            )
            return cursor.rowcount == 1

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
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM crons WHERE {where} "
            f"ORDER BY {column} {order}, cron_id {order} LIMIT ? OFFSET ?",
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
        rows = await self._db.read(f"SELECT count(*) AS n FROM crons WHERE {where}", params)
        return int(rows[0]["n"])

    @contextlib.asynccontextmanager
    async def claim_due(self, now: str) -> AsyncIterator[SqliteCronTick | None]:
        """Yield the enabled cron due earliest (at or before `now`), or None."""
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM crons WHERE enabled = 1 AND next_run_at IS NOT NULL "
            "AND next_run_at <= ? ORDER BY next_run_at LIMIT 1",
            (now,),
        )
        yield SqliteCronTick(self._db, cron_from_row(rows[0])) if rows else None


def _marks() -> str:
    return ", ".join("?" for _ in _COLUMNS.split(","))


def _row(cron: CronRecord) -> tuple[Any, ...]:
    return (
        cron.cron_id,
        cron.owner,
        cron.assistant_id,
        cron.thread_id,
        cron.schedule,
        cron.timezone,
        dumps(cron.payload),
        dumps(cron.metadata),
        cron.on_run_completed,
        cron.end_time,
        int(cron.enabled),
        cron.next_run_at,
        cron.created_at,
        cron.updated_at,
    )
