"""Feedback on runs in the run engine's SQLite database (`engine.feedback.FeedbackRepository`).

The `run_feedback` table (`engine.sqlite.database.SCHEMA`) has no foreign key (the
run tables have none); a trigger deletes a run's feedback with the run, whatever
deletes it (the run's route, its thread's deletion, a rollback).
"""

from __future__ import annotations

import sqlite3

from engine.feedback import FeedbackRecord
from engine.sqlite.database import SqliteDatabase

_COLUMNS = "feedback_id, run_id, thread_id, owner, key, score, comment, created_at"


def feedback_from_row(row: sqlite3.Row) -> FeedbackRecord:
    """Return the feedback a `run_feedback` row holds."""
    return FeedbackRecord(
        feedback_id=row["feedback_id"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        key=row["key"],
        score=float(row["score"]),
        comment=row["comment"],
        created_at=row["created_at"],
    )


class SqliteFeedbackRepository:
    """Feedback entries in `atelier.db`."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the run store's connections."""
        self._db = db

    async def add(self, feedback: FeedbackRecord, *, limit: int) -> bool:
        """Store `feedback` unless its run already has `limit` entries (one transaction)."""
        f = feedback
        async with self._db.transaction() as db:
            cursor = await db.execute(
                f"INSERT INTO run_feedback ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ? "
                "WHERE (SELECT count(*) FROM run_feedback WHERE run_id = ?) < ?",
                (
                    f.feedback_id,
                    f.run_id,
                    f.thread_id,
                    f.owner,
                    f.key,
                    f.score,
                    f.comment,
                    f.created_at,
                    f.run_id,
                    limit,
                ),
            )
            return cursor.rowcount == 1

    async def for_run(self, run_id: str) -> list[FeedbackRecord]:
        """Return a run's feedback, oldest first."""
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM run_feedback WHERE run_id = ? ORDER BY created_at, rowid",
            (run_id,),
        )
        return [feedback_from_row(row) for row in rows]
