"""Online evaluation in PostgreSQL (`OnlineEvaluationRepository`, schema version 11).

Any process scans and judges: a run's judgement row is inserted once (its primary key
is the run id, `ON CONFLICT DO NOTHING`), moved on with conditional updates, and its
end written with the run's `judge` feedback in one transaction, only while it is
still in the status the writer read (so two processes never record a verdict twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import DictRow

from engine.feedback import FeedbackRecord
from engine.online_evaluation import QUALITY_KEY, EvaluationSetting, OnlineJudgement, ReportRow
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp

_COLUMNS = (
    "run_id, thread_id, owner, assistant_id, finished_at, status, judge_run_id, "
    "judge_thread_id, score, passed, error"
)
#: A run of an experiment (its metadata names it) is never a live run.
_LIVE = "NOT (r.metadata ? 'experiment_id')"


def judgement_from_row(row: DictRow) -> OnlineJudgement:
    """Return the judgement an `online_judgements` row holds."""
    return OnlineJudgement(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        finished_at=stamp(row["finished_at"]) or "",
        status=row["status"],
        judge_run_id=row["judge_run_id"],
        judge_thread_id=row["judge_thread_id"],
        score=row["score"],
        passed=row["passed"],
        error=row["error"],
    )


def setting_from_row(row: DictRow) -> EvaluationSetting:
    """Return the setting an `evaluation_settings` row holds."""
    return EvaluationSetting(
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        sample_rate=float(row["sample_rate"]),
        since=stamp(row["since"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
    )


class PostgresOnlineEvaluationRepository:
    """Online evaluation in PostgreSQL (see the module docstring)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def put_setting(self, setting: EvaluationSetting) -> None:
        """Store the owner's setting for an assistant, replacing any."""
        s = setting
        await self._fetch(
            "INSERT INTO evaluation_settings (owner, assistant_id, sample_rate, since, "
            "updated_at) VALUES (%s, %s, %s, %s::timestamptz, %s::timestamptz) "
            "ON CONFLICT (owner, assistant_id) DO UPDATE SET sample_rate = excluded.sample_rate, "
            "since = excluded.since, updated_at = excluded.updated_at RETURNING owner",
            (s.owner, s.assistant_id, s.sample_rate, s.since, s.updated_at),
        )

    async def get_setting(self, owner: str, assistant_id: str) -> EvaluationSetting | None:
        """Return the owner's setting for an assistant, or None."""
        rows = await self._fetch(
            "SELECT owner, assistant_id, sample_rate, since, updated_at FROM evaluation_settings "
            "WHERE owner = %s AND assistant_id = %s",
            (owner, assistant_id),
        )
        return setting_from_row(rows[0]) if rows else None

    async def sampling(self) -> list[EvaluationSetting]:
        """Return every setting with a rate above 0."""
        rows = await self._fetch(
            "SELECT owner, assistant_id, sample_rate, since, updated_at FROM evaluation_settings "
            "WHERE sample_rate > 0 ORDER BY updated_at"
        )
        return [setting_from_row(row) for row in rows]

    async def unseen_runs(self, setting: EvaluationSetting, limit: int) -> list[OnlineJudgement]:
        """Return the setting's successful live runs finished since, not yet looked at."""
        rows = await self._fetch(
            "SELECT r.run_id, r.thread_id, r.finished_at FROM runs r "
            "WHERE r.owner = %s AND r.assistant_id = %s AND r.status = 'success' "
            f"AND r.finished_at >= %s::timestamptz AND {_LIVE} AND NOT EXISTS "
            "(SELECT 1 FROM online_judgements j WHERE j.run_id = r.run_id) "
            "ORDER BY r.finished_at LIMIT %s",
            (setting.owner, setting.assistant_id, setting.since, limit),
        )
        return [
            OnlineJudgement(
                run_id=row["run_id"],
                thread_id=row["thread_id"],
                owner=setting.owner,
                assistant_id=setting.assistant_id,
                finished_at=stamp(row["finished_at"]) or "",
                status="pending",
            )
            for row in rows
        ]

    async def record(self, judgements: Sequence[OnlineJudgement]) -> None:
        """Insert judgement rows; a run that has one keeps it."""
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(
                f"INSERT INTO online_judgements ({_COLUMNS}) VALUES (%s, %s, %s, %s, "
                "%s::timestamptz, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING",
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
                        j.passed,
                        j.error,
                    )
                    for j in judgements
                ],
            )

    async def open(self, limit: int) -> list[OnlineJudgement]:
        """Return judgements pending or judging, oldest first."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM online_judgements WHERE status IN ('pending', 'judging') "
            "ORDER BY created_at LIMIT %s",
            (limit,),
        )
        return [judgement_from_row(row) for row in rows]

    async def start(self, run_id: str, judge_run_id: str, judge_thread_id: str) -> bool:
        """Record the judge's run of a pending judgement."""
        rows = await self._fetch(
            "UPDATE online_judgements SET status = 'judging', judge_run_id = %s, "
            "judge_thread_id = %s, updated_at = now() WHERE run_id = %s AND status = 'pending' "
            "RETURNING run_id",
            (judge_run_id, judge_thread_id, run_id),
        )
        return bool(rows)

    async def finish(
        self, judgement: OnlineJudgement, feedback: FeedbackRecord | None, *, expected: str
    ) -> bool:
        """Record a judgement's end and its feedback entry, once (while still `expected`)."""
        j = judgement
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE online_judgements SET status = %s, score = %s, passed = %s, "
                    "error = %s, updated_at = now() WHERE run_id = %s AND status = %s "
                    "RETURNING run_id",
                    (j.status, j.score, j.passed, j.error, j.run_id, expected),
                )
            ).fetchone()
            if row is None:
                return False
            if feedback is not None:
                f = feedback
                await conn.execute(
                    "INSERT INTO run_feedback (feedback_id, run_id, thread_id, owner, key, score, "
                    "comment, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s::timestamptz)",
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
        rows = await self._fetch(
            "SELECT r.run_id, j.score AS score, j.passed AS passed, "
            "(SELECT f.score FROM run_feedback f WHERE f.run_id = r.run_id AND f.key = %s "
            " ORDER BY f.created_at DESC, f.feedback_id DESC LIMIT 1) AS quality "
            "FROM runs r LEFT JOIN online_judgements j "
            "ON j.run_id = r.run_id AND j.status = 'done' "
            "WHERE r.owner = %s AND r.assistant_id = %s AND r.finished_at >= %s::timestamptz "
            f"AND r.finished_at < %s::timestamptz AND {_LIVE} AND (j.run_id IS NOT NULL OR "
            "EXISTS (SELECT 1 FROM run_feedback q WHERE q.run_id = r.run_id AND q.key = %s)) "
            "ORDER BY r.finished_at DESC LIMIT %s",
            (QUALITY_KEY, owner, assistant_id, since, until, QUALITY_KEY, limit),
        )
        return [
            ReportRow(
                run_id=row["run_id"],
                score=row["score"],
                passed=row["passed"],
                quality=row["quality"],
            )
            for row in rows
        ]

    async def pending(self, owner: str, assistant_id: str) -> int:
        """Return how many of the owner's runs of the assistant wait for the judge."""
        rows = await self._fetch(
            "SELECT count(*) AS n FROM online_judgements WHERE owner = %s AND assistant_id = %s "
            "AND status IN ('pending', 'judging')",
            (owner, assistant_id),
        )
        return int(rows[0]["n"])
