"""Feedback on runs in PostgreSQL (`engine.feedback.FeedbackRepository`).

The `run_feedback` table (schema migration "run feedback", `engine.postgres.migrations`)
references its run, so a run's feedback is deleted with it.
"""

from __future__ import annotations

from psycopg.rows import DictRow

from engine.feedback import FeedbackRecord
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp

_COLUMNS = "feedback_id, run_id, thread_id, owner, key, score, comment, created_at"


def feedback_from_row(row: DictRow) -> FeedbackRecord:
    """Return the feedback a `run_feedback` row holds."""
    return FeedbackRecord(
        feedback_id=row["feedback_id"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        key=row["key"],
        score=float(row["score"]),
        comment=row["comment"],
        created_at=stamp(row["created_at"]) or "",
    )


class PostgresFeedbackRepository:
    """Feedback entries in PostgreSQL."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def add(self, feedback: FeedbackRecord, *, limit: int) -> bool:
        """Store `feedback` unless its run already has `limit` entries.

        The run's row is locked for the count and the insert, so two concurrent
        entries cannot both pass the limit.
        """
        f = feedback
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (f.run_id,))
            cursor = await conn.execute(
                f"INSERT INTO run_feedback ({_COLUMNS}) "
                "SELECT %s, %s, %s, %s, %s, %s, %s, %s::timestamptz "
                "WHERE (SELECT count(*) FROM run_feedback WHERE run_id = %s) < %s",
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
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    f"SELECT {_COLUMNS} FROM run_feedback WHERE run_id = %s "
                    "ORDER BY created_at, feedback_id",
                    (run_id,),
                )
            ).fetchall()
        return [feedback_from_row(row) for row in rows]
