"""Online evaluation: a share of an assistant's live runs judged, and compared with people.

An API key sets a sampling rate on an assistant (a built-in one, for that key, or one it
created): `EvaluationSetting`. From then on, that share of the assistant's runs that
finish with `success` — not an experiment's runs — is scored by the product's post
judge (`EvaluationHooks.post_judge`, a hidden assistant run as an ordinary run), and
the verdict is recorded as run feedback with key `judge`, next to people's thumbs
(key `quality`).

Durably, once. The runs to judge are found in the database (`status = success`,
finished since the rate was set, not yet looked at), so a process that dies between
a run's end and its judging loses nothing: any process finds the run later. Each run
gets one `OnlineJudgement` row (its primary key is the run id): whether it was
sampled (`sampled_run`, a hash of the run id, so every process decides alike), the
judge's run (started with an idempotency key, so at most one), and `done` written in
the transaction that records the feedback, only while the row is still `judging`.

`report` says, over a window, the judge's mean score and pass rate, people's 👍 share,
and how often the judge's pass/fail matches the person's thumb on the runs that have
both (`core.stats.agreement_on_common`). See docs/evaluate.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.stats import agreement_on_common, mean_of, pass_rate

#: The feedback key of the judge's verdict, and of people's thumbs (1 up, 0 down).
JUDGE_KEY = "judge"
QUALITY_KEY = "quality"
#: Where a judgement stands.
JudgementStatus = Literal["skipped", "pending", "judging", "done", "error"]
#: Runs one pass of the scanner looks at, and judgements it moves on, at most.
SCAN_BATCH = 100
JUDGE_BATCH = 50
#: Rows a report reads at most (the newest in its window).
MAX_REPORT_ROWS = 50_000


def sampled_run(run_id: str, rate: float) -> bool:
    """Whether a run is in the sample at `rate` (the same answer in every process)."""
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


@dataclass(slots=True)
class EvaluationSetting:
    """The sampling rate an API key set on an assistant."""

    owner: str
    assistant_id: str
    sample_rate: float
    #: Runs finished since then are sampled (set when the rate goes above 0).
    since: str
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        """Return the setting as the HTTP API answers it."""
        return {
            "assistant_id": self.assistant_id,
            "sample_rate": self.sample_rate,
            "since": self.since,
            "updated_at": self.updated_at,
        }


@dataclass(slots=True)
class OnlineJudgement:
    """One live run looked at by online evaluation."""

    run_id: str
    thread_id: str
    owner: str
    assistant_id: str
    #: When the run finished (the report's window reads it).
    finished_at: str
    status: JudgementStatus
    judge_run_id: str | None = None
    judge_thread_id: str | None = None
    score: float | None = None
    passed: bool | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReportRow:
    """What a report reads of one run: the judge's verdict and the person's thumb."""

    run_id: str
    #: The judge's score and pass/fail (None: not judged, or no usable answer).
    score: float | None
    passed: bool | None
    #: The person's latest `quality` score (None: no thumb).
    quality: float | None


def report(rows: Sequence[ReportRow]) -> dict[str, Any]:
    """Return the judge's mean score, people's 👍 share and their agreement over `rows`.

    A thumb is up when its score is at least 0.5 (the console sends 1 or 0).
    """
    judged = {r.run_id: bool(r.passed) for r in rows if r.passed is not None}
    people = {r.run_id: r.quality >= 0.5 for r in rows if r.quality is not None}
    mean = mean_of(r.score for r in rows if r.passed is not None)
    judge_pass = pass_rate(judged.values())
    thumbs = pass_rate(people.values())
    agree = agreement_on_common(judged, people)
    return {
        "judge": {
            "judged": len(judged),
            "mean_score": mean.value,
            "pass_rate": judge_pass.rate,
            "pass_rate_low": judge_pass.low,
            "pass_rate_high": judge_pass.high,
        },
        "people": {
            "rated": len(people),
            "thumbs_up": sum(1 for up in people.values() if up),
            "thumbs_up_share": thumbs.rate,
            "thumbs_up_share_low": thumbs.low,
            "thumbs_up_share_high": thumbs.high,
        },
        "agreement": agree.as_dict(),
    }


__all__ = [
    "JUDGE_BATCH",
    "JUDGE_KEY",
    "MAX_REPORT_ROWS",
    "QUALITY_KEY",
    "SCAN_BATCH",
    "EvaluationSetting",
    "JudgementStatus",
    "OnlineJudgement",
    "ReportRow",
    "report",
    "sampled_run",
]
