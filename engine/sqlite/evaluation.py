"""Online evaluation in the run engine's SQLite database (`OnlineEvaluationRepository`).

A judgement's end and its feedback entry are written in one transaction, only while
the judgement is still `judging`, so a run's verdict is recorded once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from engine.feedback import FeedbackRecord
from engine.online_evaluation import (
    QUALITY_KEY,
    EvaluationSetting,
    OnlineJudgement,
    ReportRow,
)
from engine.records import now
from engine.sqlite.database import SqliteDatabase

_COLUMNS = (
    "run_id, thread_id, owner, assistant_id, finished_at, status, judge_run_id, "
    "judge_thread_id, score, passed, error"
)
#: A run of an experiment (its metadata names it) is never a live run.
_LIVE = "json_extract(r.metadata, '$.experiment_id') IS NULL"


def judgement_from_row(row: sqlite3.Row) -> OnlineJudgement:
    """Return the judgement an `online_judgements` row holds."""
    return OnlineJudgement(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        finished_at=row["finished_at"],
        status=row["status"],
        judge_run_id=row["judge_run_id"],
        judge_thread_id=row["judge_thread_id"],
        score=row["score"],
        passed=None if row["passed"] is None else bool(row["passed"]),
        error=row["error"],
    )


def setting_from_row(row: sqlite3.Row) -> EvaluationSetting:
    """Return the setting an `evaluation_settings` row holds."""
    return EvaluationSetting(
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        sample_rate=float(row["sample_rate"]),
        since=row["since"],
        updated_at=row["updated_at"],
    )


class SqliteOnlineEvaluationRepository:
    """Online evaluation in SQLite (see `engine.repositories.OnlineEvaluationRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def put_setting(self, setting: EvaluationSetting) -> None:
        """Store the owner's setting for an assistant, replacing any."""
        s = setting
        await self._db.execute(
            [
                (
                    "INSERT INTO evaluation_settings (owner, assistant_id, sample_rate, since, "
                    "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, assistant_id) DO "
                    "UPDATE SET sample_rate = excluded.sample_rate, since = excluded.since, "
                    "updated_at = excluded.updated_at",
                    (s.owner, s.assistant_id, s.sample_rate, s.since, s.updated_at),
                )
            ]
        )

    async def get_setting(self, owner: str, assistant_id: str) -> EvaluationSetting | None:
        """Return the owner's setting for an assistant, or None."""
        rows = await self._db.read(
            "SELECT owner, assistant_id, sample_rate, since, updated_at FROM evaluation_settings "
            "WHERE owner = ? AND assistant_id = ?",
            (owner, assistant_id),
        )
        return setting_from_row(rows[0]) if rows else None

    async def sampling(self) -> list[EvaluationSetting]:
        """Return every setting with a rate above 0."""
        rows = await self._db.read(
            "SELECT owner, assistant_id, sample_rate, since, updated_at FROM evaluation_settings "
            "WHERE sample_rate > 0 ORDER BY updated_at"
        )
        return [setting_from_row(row) for row in rows]

    async def unseen_runs(self, setting: EvaluationSetting, limit: int) -> list[OnlineJudgement]:
        """Return the setting's successful live runs finished since, not yet looked at."""
        rows = await self._db.read(
            "SELECT r.run_id, r.thread_id, r.finished_at FROM runs r "
            "WHERE r.owner = ? AND r.assistant_id = ? AND r.status = 'success' "
            f"AND r.finished_at >= ? AND {_LIVE} AND NOT EXISTS "
            "(SELECT 1 FROM online_judgements j WHERE j.run_id = r.run_id) "
            "ORDER BY r.finished_at LIMIT ?",
            (setting.owner, setting.assistant_id, setting.since, limit),
        )
        return [
            OnlineJudgement(
                run_id=row["run_id"],
                thread_id=row["thread_id"],
                owner=setting.owner,
                assistant_id=setting.assistant_id,
                finished_at=row["finished_at"],
                status="pending",
            )
            for row in rows
        ]

    async def record(self, judgements: Sequence[OnlineJudgement]) -> None:
        """Insert judgement rows; a run that has one keeps it."""
        stamp = now()
        async with self._db.transaction() as db:
            await db.executemany(
                f"INSERT INTO online_judgements ({_COLUMNS}, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                [
                    (
                        j.run_id,
                        j.thread_id,
                        j.owner,
                        j.assistant_id,
                        j.finished_at,
                        j.status,
                        j.judge_run_id,
                        j.judge_thread_id,
                        j.score,
                        None if j.passed is None else int(j.passed),
                        j.error,
                        stamp,
                        stamp,
                    )
                    for j in judgements
                ],
            )

    async def open(self, limit: int) -> list[OnlineJudgement]:
        """Return judgements pending or judging, oldest first."""
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM online_judgements WHERE status IN ('pending', 'judging') "
            "ORDER BY created_at LIMIT ?",
            (limit,),
        )
        return [judgement_from_row(row) for row in rows]

    async def start(self, run_id: str, judge_run_id: str, judge_thread_id: str) -> bool:
        """Record the judge's run of a pending judgement."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE online_judgements SET status = 'judging', judge_run_id = ?, "
                "judge_thread_id = ?, updated_at = ? WHERE run_id = ? AND status = 'pending'",
                (judge_run_id, judge_thread_id, now(), run_id),
            )
            return cursor.rowcount == 1

    async def finish(
        self, judgement: OnlineJudgement, feedback: FeedbackRecord | None, *, expected: str
    ) -> bool:
        """Record a judgement's end and its feedback entry, once (while still `expected`)."""
        j = judgement
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE online_judgements SET status = ?, score = ?, passed = ?, error = ?, "
                "updated_at = ? WHERE run_id = ? AND status = ?",
                (
                    j.status,
                    j.score,
                    None if j.passed is None else int(j.passed),
                    j.error,
                    now(),
                    j.run_id,
                    expected,
                ),
            )
            if cursor.rowcount != 1:
                return False
            if feedback is not None:
                f = feedback
                await db.execute(
                    "INSERT INTO run_feedback (feedback_id, run_id, thread_id, owner, key, "
                    "score, comment, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        f.feedback_id,
                        f.run_id,
                        f.thread_id,
                        f.owner,
                        f.key,
                        f.score,
                        f.comment,
                        f.created_at,
                    ),
                )
            return True

    async def report_rows(
        self, owner: str, assistant_id: str, since: str, until: str, limit: int
    ) -> list[ReportRow]:
        """Return the judge's verdict and people's latest thumb per run in the window."""
        rows = await self._db.read(
            "SELECT r.run_id, j.score AS score, j.passed AS passed, "
            "(SELECT f.score FROM run_feedback f WHERE f.run_id = r.run_id AND f.key = ? "
            " ORDER BY f.created_at DESC, f.rowid DESC LIMIT 1) AS quality "
            "FROM runs r LEFT JOIN online_judgements j "
            "ON j.run_id = r.run_id AND j.status = 'done' "
            "WHERE r.owner = ? AND r.assistant_id = ? AND r.finished_at >= ? "
            f"AND r.finished_at < ? AND {_LIVE} AND (j.run_id IS NOT NULL OR EXISTS "
            "(SELECT 1 FROM run_feedback q WHERE q.run_id = r.run_id AND q.key = ?)) "
            "ORDER BY r.finished_at DESC LIMIT ?",
            (QUALITY_KEY, owner, assistant_id, since, until, QUALITY_KEY, limit),
        )
        return [
            ReportRow(
                run_id=row["run_id"],
                score=row["score"],
                passed=None if row["passed"] is None else bool(row["passed"]),
                quality=row["quality"],
            )
            for row in rows
        ]

    async def pending(self, owner: str, assistant_id: str) -> int:
        """Return how many of the owner's runs of the assistant wait for the judge."""
        rows = await self._db.read(
            "SELECT count(*) AS n FROM online_judgements WHERE owner = ? AND assistant_id = ? "
            "AND status IN ('pending', 'judging')",
            (owner, assistant_id),
        )
        return int(rows[0]["n"])
