"""Runs in the run engine's SQLite database (`RunRepository`)."""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime
from typing import Any

import aiosqlite

from engine.protocols import StorageUnavailable
from engine.quotas import Limits, check_run_counts
from engine.records import (
    ACTIVE_STATUSES,
    RunRecord,
    RunStatus,
    RunStatusChange,
    ThreadRecord,
    now,
    run_from_row,
)
from engine.serde import dumps
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.quotas import run_counts
from engine.sqlite.threads import Statement, insert_thread

log = logging.getLogger(__name__)

_COLUMNS = (
    "run_id, thread_id, owner, assistant_id, status, created_at, updated_at, metadata, "
    "kwargs, multitask_strategy, attempt, idempotency_key, request_hash"
)
_VALUES = ", ".join("?" for _ in range(13))


def run_status_statement(change: RunStatusChange) -> Statement:
    """Return the statement that records a run's status (finished when terminal)."""
    stamp = now()
    finished = None if change.status in ACTIVE_STATUSES else stamp
    return (
        "UPDATE runs SET status = ?, updated_at = ?, finished_at = ?, "
        "attempt = COALESCE(?, attempt), cancel_reason = COALESCE(?, cancel_reason), "
        "error = COALESCE(?, error) WHERE run_id = ?",
        (
            change.status,
            stamp,
            finished,
            change.attempt,
            change.cancel_reason,
            None if change.error is None else dumps(change.error),
            change.run_id,
        ),
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
        dumps(run.metadata),
        dumps(run.options.to_json()),
        run.multitask_strategy,
        run.attempt,
        run.idempotency_key,
        run.request_hash,
    )


async def insert_run(
    db: aiosqlite.Connection,
    run: RunRecord,
    new_thread: ThreadRecord | None,
    *,
    exclusive: bool,
    limits: Limits | None = None,
) -> bool:
    """Insert a run (and its new thread) inside a write transaction (see `insert`).

    With `limits`, the owner's runs and spend are counted first, in the same
    transaction (SQLite's one writer: nobody inserts in between).

    Returns:
        False when `exclusive` and the thread was busy (nothing is written).

    Raises:
        QuotaExceeded: The run would go over one of `limits` (nothing is written).
    """
    if limits is not None and limits.counts_runs:
        stamp = datetime.fromisoformat(run.created_at)
        check_run_counts(limits, await run_counts(db, run.owner, limits, stamp), stamp)
    if new_thread is not None:
        await insert_thread(db, new_thread)
    if exclusive:
        cursor = await db.execute(
            f"INSERT INTO runs ({_COLUMNS}) SELECT {_VALUES} WHERE NOT EXISTS "
            "(SELECT 1 FROM runs WHERE thread_id = ? AND status IN ('pending', 'running'))",
            (*_run_params(run), run.thread_id),
        )
        if cursor.rowcount != 1:
            return False
    else:
        await db.execute(f"INSERT INTO runs ({_COLUMNS}) VALUES ({_VALUES})", _run_params(run))
    # Like LangGraph Platform, a thread learns the graph that first ran on it.
    await db.execute(
        "UPDATE threads SET status = 'busy', updated_at = ?, metadata = CASE "
        "WHEN json_extract(metadata, '$.graph_id') IS NULL "
        "THEN json_set(metadata, '$.graph_id', ?, '$.assistant_id', ?) "
        "ELSE metadata END WHERE thread_id = ?",
        (now(), run.graph_id, run.assistant_id, run.thread_id),
    )
    return True


class SqliteRunRepository:
    """Runs in SQLite (see `engine.protocols.RunRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(
        self,
        run: RunRecord,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool,
        limits: Limits | None = None,
    ) -> bool:
        """Store a run (and the thread it creates) in one transaction.

        Args:
            run: The run, status `pending`.
            new_thread: A thread to create with the run, or None to use an existing one.
            exclusive: Store the run only if its thread has no pending or running run;
                the check and the insert are one statement, so two racing requests
                cannot both pass it.
            limits: The owner's limits, counted in the same transaction (None: none).

        Returns:
            False when `exclusive` and the thread was busy (nothing is written).

        Raises:
            StorageUnavailable: The database took no write (locked, full).
            ThreadExists: `new_thread`'s id is taken.
            QuotaExceeded: The run would go over one of `limits`.
        """
        try:
            return await self._insert(run, new_thread, exclusive=exclusive, limits=limits)
        except sqlite3.OperationalError as exc:  # nothing was written: the client may retry
            log.exception("could not record a new run")
            raise StorageUnavailable(str(exc)) from exc

    async def _insert(
        self,
        run: RunRecord,
        new_thread: ThreadRecord | None,
        *,
        exclusive: bool,
        limits: Limits | None,
    ) -> bool:
        async with self._db.transaction() as db:
            return await insert_run(db, run, new_thread, exclusive=exclusive, limits=limits)

    async def get(self, run_id: str) -> RunRecord | None:
        """Return a run by id."""
        rows = await self._db.read("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return run_from_row(rows[0]) if rows else None

    async def find(self, owner: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run on a thread, or None."""
        run = await self.get(run_id)
        if run is None or run.owner != owner or run.thread_id != thread_id:
            return None
        return run

    async def find_idempotent(self, owner: str, key: str) -> RunRecord | None:
        """Return the owner's run created with an `Idempotency-Key`, or None."""
        rows = await self._db.read(
            "SELECT * FROM runs WHERE owner = ? AND idempotency_key = ?", (owner, key)
        )
        return run_from_row(rows[0]) if rows else None

    async def for_thread(
        self, thread_id: str, *, limit: int = 10, offset: int = 0, status: RunStatus | None = None
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first."""
        sql = "SELECT * FROM runs WHERE thread_id = ?"
        params: list[Any] = [thread_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        return [run_from_row(row) for row in await self._db.read(sql, [*params, limit, offset])]

    async def active(self, thread_id: str | None = None) -> list[RunRecord]:
        """Return pending and running runs (of one thread, or all), oldest first."""
        sql = "SELECT * FROM runs WHERE status IN ('pending', 'running')"
        params: list[Any] = []
        if thread_id is not None:
            sql += " AND thread_id = ?"
            params.append(thread_id)
        rows = await self._db.read(sql + " ORDER BY created_at, rowid", params)
        return [run_from_row(row) for row in rows]

    async def delete(self, run_id: str) -> None:
        """Delete a run record and its event log."""
        async with self._db.transaction() as db:
            await db.execute("DELETE FROM run_events WHERE run_id = ?", (run_id,))
            await db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
