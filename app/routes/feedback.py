"""Feedback on runs: what a person thought of a run's post (engine/feedback.py).

    POST /runs/{run_id}/feedback    add one entry: a key, a score, an optional comment
    GET  /runs/{run_id}/feedback    the run's entries, oldest first

Only the API key that owns the run adds or reads its feedback; another key, like an
unknown run, gets 404. A score is a number, or a boolean stored as 1 or 0 (the
console's thumbs up and down). Each stored entry is counted in `/metrics`
(`atelier_feedback_score{key}`: count and sum, so the mean) by `report_feedback`,
the one place an entry is reported once stored.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from app.access import READ, WRITE
from app.deps import FeedbackDep, PrincipalDep
from app.metrics import AtelierMetrics, MetricsDep
from app.schemas import ID_PATTERN
from engine import (
    FEEDBACK_KEY_PATTERN,
    MAX_COMMENT_CHARS,
    MAX_FEEDBACK_PER_RUN,
    MAX_SCORE,
    FeedbackRecord,
)

router = APIRouter(tags=["feedback"])

RunId = Annotated[str, Path(pattern=ID_PATTERN, description="Run id.")]

Score = Annotated[
    float,
    Field(
        ge=-MAX_SCORE,
        le=MAX_SCORE,
        allow_inf_nan=False,
        description="The score; the console sends 1 (thumbs up) or 0 (thumbs down).",
    ),
]


class FeedbackCreate(BaseModel):
    """One person's opinion of a run."""

    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, StringConstraints(pattern=FEEDBACK_KEY_PATTERN)] = Field(
        description="What the score is about: a lower-case identifier.",
        examples=["quality", "published"],
    )
    score: StrictBool | Score = Field(
        description="A number, or a boolean stored as 1 (true) or 0 (false).", examples=[1]
    )
    comment: Annotated[str, StringConstraints(max_length=MAX_COMMENT_CHARS)] | None = Field(
        default=None, description="Free text.", examples=["标题很抓人，第二段太长。"]
    )


class FeedbackOut(BaseModel):
    """A stored feedback entry."""

    feedback_id: str
    run_id: str
    thread_id: str
    key: str
    score: float
    comment: str | None
    created_at: str = Field(description="When it was stored (ISO 8601, UTC).")


def report_feedback(metrics: AtelierMetrics, feedback: FeedbackRecord) -> None:
    """Report a stored feedback entry: counted in `/metrics`.

    The one call site of a stored entry in this process's metrics; the entry goes on
    the run's trace in the engine's feedback service, whichever door stored it.
    """
    metrics.feedback_recorded(feedback.key, feedback.score)


@router.post(
    "/runs/{run_id}/feedback",
    response_model=FeedbackOut,
    summary="Add feedback on a run",
    responses={409: {"description": f"The run has {MAX_FEEDBACK_PER_RUN} entries already."}},
    dependencies=[WRITE],
)
async def add_feedback(
    run_id: RunId,
    body: FeedbackCreate,
    feedback_service: FeedbackDep,
    owner: PrincipalDep,
    metrics: MetricsDep,
) -> dict[str, Any]:
    """Record what the caller thought of one of their runs."""
    feedback = await feedback_service.add(
        owner,
        run_id,
        key=body.key,
        score=float(body.score),
        comment=body.comment or None,
    )
    report_feedback(metrics, feedback)
    return feedback.as_dict()


@router.get(
    "/runs/{run_id}/feedback",
    response_model=list[FeedbackOut],
    summary="List a run's feedback",
    dependencies=[READ],
)
async def list_feedback(
    run_id: RunId, feedback_service: FeedbackDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the feedback on one of the caller's runs, oldest first."""
    return [f.as_dict() for f in await feedback_service.list_for_run(owner, run_id)]
