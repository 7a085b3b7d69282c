"""The online evaluation service: sampling rates, the judging of live runs, the report.

`set_rate` stores an API key's sampling rate on an assistant (a built-in one, for that
key, or one it created). The service's scheduler, every `EVALUATION_POLL` seconds and
in any process: finds the sampled assistants' runs that ended with `success` since
their rate was set and were not looked at yet, records whether each is in the sample
(`engine.online_evaluation.sampled_run`), starts the post judge's run for each sampled
one (`judge_spec`, this adapter's `RunSpec` builder: a hidden assistant, an idempotency
key naming the judged run) and, once that run ended, records its verdict as the judged
run's feedback (key `judge`) with the judgement's end, in one transaction. See
`engine.online_evaluation` for why each run is judged once and none is lost.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

from engine.crons import CronScheduler
from engine.errors import Conflict, RunsError, Unavailable
from engine.experiments import EvaluationHooks
from engine.feedback import FEEDBACK_KEY_PATTERN, MAX_COMMENT_CHARS, MAX_SCORE, FeedbackRecord
from engine.keys import OwnerCheck
from engine.online_evaluation import (
    JUDGE_BATCH,
    MAX_REPORT_ROWS,
    SCAN_BATCH,
    EvaluationSetting,
    OnlineJudgement,
    report,
    sampled_run,
)
from engine.records import now
from engine.repositories import OnlineEvaluationRepository
from engine.services.core import EngineCore
from engine.services.runs import RunsService
from engine.spec import RunSpec

log = logging.getLogger(__name__)

#: Seconds between two passes of the scheduler.
EVALUATION_POLL = 1.0
#: Why a sampled run of a key that may no longer act is not judged.
STOPPED = "not judged: its API key was revoked or expired"


def judge_spec(
    *, owner: str, assistant_id: str, run_input: Any, metadata: Mapping[str, Any], run_id: str
) -> RunSpec:
    """Return the run request of the post judge for one live run (its id names the request)."""
    return RunSpec(
        assistant_id=assistant_id,
        owner=owner,
        thread_id=None,
        input=run_input,
        stream_mode=("custom",),
        on_disconnect="continue",
        on_completion="keep",
        metadata=metadata,
        multitask_strategy="reject",
        idempotency_key=f"online-judge:{run_id}",
    )


def _feedback(judgement: OnlineJudgement, entry: Mapping[str, Any]) -> FeedbackRecord | None:
    """Return the feedback entry a verdict makes on the judged run (None: a malformed one)."""
    key, score, comment = entry.get("key"), entry.get("score"), entry.get("comment")
    if not isinstance(key, str) or not re.match(FEEDBACK_KEY_PATTERN, key):
        return None
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    if not math.isfinite(score) or abs(score) > MAX_SCORE:
        return None
    return FeedbackRecord(
        feedback_id=str(uuid.uuid4()),
        run_id=judgement.run_id,
        thread_id=judgement.thread_id,
        owner=judgement.owner,
        key=key,
        score=float(score),
        comment=str(comment)[:MAX_COMMENT_CHARS] if comment is not None else None,
        created_at=now(),
    )


class OnlineEvaluationService:
    """Sampling rates per API key and assistant, the judging of live runs, the report."""

    def __init__(
        self,
        core: EngineCore,
        runs: RunsService,
        evaluations: OnlineEvaluationRepository,
        hooks: EvaluationHooks,
        *,
        interval: float = EVALUATION_POLL,
        owners: OwnerCheck | None = None,
    ) -> None:
        """Serve online evaluation from `evaluations`, judging with the product's `hooks`.

        `owners` says whether an owner may still act: the runs of a revoked or expired
        key are no longer sampled nor judged (None: every owner's are).
        """
        self._core = core
        self._runs = runs
        self._evaluations = evaluations
        self._hooks = hooks
        self._owners = owners
        self.scheduler = CronScheduler(self._scheduled_pass, interval=interval)

    def start(self) -> None:
        """Start judging sampled runs in a task of this loop."""
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop judging (a pass in progress is cancelled)."""
        await self.scheduler.stop()

    # -- the setting and the report ------------------------------------------------------

    async def setting(self, owner: str, assistant_id: str) -> EvaluationSetting:
        """Return the owner's setting for an assistant (rate 0 when never set).

        Raises:
            NotFound: No such assistant (for this owner).
        """
        assistant = await self._core.resolve(owner, assistant_id)
        stored = await self._evaluations.get_setting(owner, assistant.assistant_id)
        if stored is not None:
            return stored
        return EvaluationSetting(
            owner=owner,
            assistant_id=assistant.assistant_id,
            sample_rate=0.0,
            since="",
            updated_at="",
        )

    async def set_rate(self, owner: str, assistant_id: str, rate: float) -> EvaluationSetting:
        """Set the share (0–1) of the assistant's live runs the judge scores, from now on.

        Runs that finished before the rate went above 0 are never judged; changing a
        positive rate keeps the runs finished since then in the sample's reach.
        """
        current = await self.setting(owner, assistant_id)
        stamp = now()
        keeps = current.sample_rate > 0 and rate > 0
        setting = EvaluationSetting(
            owner=owner,
            assistant_id=current.assistant_id,
            sample_rate=rate,
            since=current.since if keeps else stamp,
            updated_at=stamp,
        )
        await self._evaluations.put_setting(setting)
        return setting

    async def report(
        self, owner: str, assistant_id: str, *, since: str, until: str
    ) -> dict[str, Any]:
        """Return the setting and, over [since, until), the judge's and people's verdicts.

        The judge's mean score and pass rate, people's 👍 share (feedback `quality`),
        and their agreement on the runs that have both (`engine.online_evaluation.report`).
        """
        setting = await self.setting(owner, assistant_id)
        rows = await self._evaluations.report_rows(
            owner, setting.assistant_id, since, until, MAX_REPORT_ROWS
        )
        return {
            **setting.to_json(),
            "window": {"since": since, "until": until},
            "pending": await self._evaluations.pending(owner, setting.assistant_id),
            **report(rows),
        }

    # -- judging -------------------------------------------------------------------------

    async def _scheduled_pass(self, _now: Any) -> int:
        return await self.advance()

    async def advance(self) -> int:
        """Look at newly finished runs, start judges, record verdicts; return judges started."""
        for setting in await self._evaluations.sampling():
            if not await self._acts(setting.owner):
                continue  # its runs are looked at again if its key acts again
            unseen = await self._evaluations.unseen_runs(setting, SCAN_BATCH)
            for judgement in unseen:
                sampled = sampled_run(judgement.run_id, setting.sample_rate)
                judgement.status = "pending" if sampled else "skipped"
            if unseen:
                await self._evaluations.record(unseen)
        started = 0
        for judgement in await self._evaluations.open(JUDGE_BATCH):
            if self._core.closing:
                break
            try:
                if judgement.status == "pending" and not await self._acts(judgement.owner):
                    judgement.status, judgement.error = "skipped", STOPPED
                    await self._evaluations.finish(judgement, None, expected="pending")
                elif judgement.status == "pending":
                    started += await self._start(judgement)
                else:
                    await self._collect(judgement)
            except (Unavailable, Conflict):
                break  # the engine takes no run now: next pass
            except Exception:  # one run's judging must not hold the others up
                log.exception("online evaluation of run %s failed", judgement.run_id)
        return started

    async def _acts(self, owner: str) -> bool:
        """Return whether `owner`'s runs may still be judged (its key may act)."""
        return self._owners is None or await self._owners.active(owner)

    async def _start(self, judgement: OnlineJudgement) -> int:
        """Start the judge of a sampled run (or skip a run without a post)."""
        run = await self._core.runs.get(judgement.run_id)
        if run is None:
            return 0  # deleted: its judgement goes with it
        thread = await self._core.threads.get(run.owner, run.thread_id)
        judge_input = self._hooks.post_judge_input(
            run.options.input, thread.values if thread is not None else None
        )
        if judge_input is None:
            judgement.status, judgement.error = "skipped", "the run has no post to judge"
            await self._evaluations.finish(judgement, None, expected="pending")
            return 0
        labels = {"evaluation": "online", "judged_run_id": run.run_id}
        spec = judge_spec(
            owner=run.owner,
            assistant_id=self._hooks.post_judge,
            run_input=judge_input,
            metadata=labels,
            run_id=run.run_id,
        )
        try:
            judge, _ = await self._runs.create(
                spec, assistant=self._core.internal[self._hooks.post_judge], thread_metadata=labels
            )
        except (Unavailable, Conflict):
            raise
        except RunsError as exc:
            judgement.status, judgement.error = "error", exc.message
            await self._evaluations.finish(judgement, None, expected="pending")
            return 0
        await self._evaluations.start(judgement.run_id, judge.run_id, judge.thread_id)
        return 1

    async def _collect(self, judgement: OnlineJudgement) -> None:
        """Record the verdict of a judge whose run has ended, as the judged run's feedback."""
        judge = await self._core.runs.get(judgement.judge_run_id or "")
        if judge is not None and judge.active:
            return
        values = None
        if judge is not None and judge.status == "success":
            thread = await self._core.threads.get(judge.owner, judge.thread_id)
            values = thread.values if thread is not None else None
        verdict = self._hooks.post_judgement(values)
        feedback = None
        if verdict.feedback is not None and verdict.score is not None:
            feedback = _feedback(judgement, verdict.feedback)
        judgement.status = "done" if verdict.score is not None else "error"
        judgement.score, judgement.passed = verdict.score, verdict.passed
        judgement.error = None if verdict.score is not None else "the judge gave no usable answer"
        recorded = await self._evaluations.finish(judgement, feedback, expected="judging")
        tracing = self._core.setup.tracing
        if recorded and feedback is not None and tracing is not None:
            judged = await self._core.runs.get(judgement.run_id)
            if judged is not None:
                tracing.record_feedback(
                    judged, key=feedback.key, score=feedback.score, comment=feedback.comment
                )
