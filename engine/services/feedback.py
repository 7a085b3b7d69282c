"""The feedback service: what a person thought of a run, stored and put on its trace.

Only the API key that owns a run adds feedback to it or reads it (`engine.feedback`
says what an entry holds). See docs/architecture.md.
"""

from __future__ import annotations

import uuid

from engine.errors import Conflict
from engine.feedback import MAX_FEEDBACK_PER_RUN, FeedbackRecord, FeedbackRepository
from engine.records import now
from engine.services.core import EngineCore
from engine.services.runs import RunsService


class FeedbackService:
    """Feedback entries on runs, each run's owner's."""

    def __init__(self, core: EngineCore, feedback: FeedbackRepository, runs: RunsService) -> None:
        """Store feedback in `feedback`; find the runs it is about through `runs`."""
        self._core = core
        self._feedback = feedback
        self._runs = runs

    async def add(
        self, owner: str, run_id: str, *, key: str, score: float, comment: str | None
    ) -> FeedbackRecord:
        """Record the owner's feedback on their run and its trace; raise NotFound or Conflict."""
        run = await self._runs.owned(owner, run_id)
        feedback = FeedbackRecord(
            feedback_id=str(uuid.uuid4()),
            run_id=run.run_id,
            thread_id=run.thread_id,
            owner=owner,
            key=key,
            score=score,
            comment=comment,
            created_at=now(),
        )
        if not await self._feedback.add(feedback, limit=MAX_FEEDBACK_PER_RUN):
            raise Conflict(
                f"run {run_id!r} already has {MAX_FEEDBACK_PER_RUN} feedback entries, "
                "the most a run keeps"
            )
        tracing = self._core.setup.tracing
        if tracing is not None:  # a feedback event on the run's trace, if it has one
            tracing.record_feedback(run, key=key, score=score, comment=comment)
        return feedback

    async def list_for_run(self, owner: str, run_id: str) -> list[FeedbackRecord]:
        """Return the feedback on the owner's run, oldest first; raise NotFound."""
        await self._runs.owned(owner, run_id)
        return await self._feedback.for_run(run_id)
