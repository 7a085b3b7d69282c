"""Online evaluation: the judge scores a share of an assistant's live runs.

    PUT /assistants/{a}/evaluation    set the sampling rate (0–1) of the caller's runs
    GET /assistants/{a}/evaluation    the rate, and over a window: the judge's mean score,
                                      people's 👍 share, and how often they agree

From the moment the rate is above 0, that share of the assistant's runs that end with
`success` (the caller's; not an experiment's) is scored by the post judge (the `judge`
model role) and the verdict recorded as run feedback with key `judge`, beside people's
thumbs (key `quality`, 1 up and 0 down, `POST /runs/{run_id}/feedback`). A built-in
assistant's rate is each API key's own; a preset is its creator's (another key: 404).
See docs/evaluate.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from app.access import READ, WRITE
from app.deps import EvaluationDep, PrincipalDep

router = APIRouter(tags=["evaluation"])

AssistantId = Annotated[str, Path(min_length=1, max_length=128, description="Assistant id.")]
#: The report's window when none is given: the last 30 days.
DEFAULT_WINDOW = timedelta(days=30)


class EvaluationIn(BaseModel):
    """Body of `PUT /assistants/{assistant_id}/evaluation`."""

    model_config = ConfigDict(extra="forbid")

    sample_rate: float = Field(
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Share of the assistant's finished live runs the judge scores "
        "(0 stops, 1 scores every one).",
        examples=[0.2],
    )


class EvaluationSettingOut(BaseModel):
    """An assistant's sampling rate for the caller."""

    assistant_id: str
    sample_rate: float
    since: str = Field(description="Runs finished since then are sampled ('' when never set).")
    updated_at: str


class Window(BaseModel):
    """The report's time window (runs finished in [since, until))."""

    since: str
    until: str


class JudgeReport(BaseModel):
    """The judge's verdicts in the window."""

    judged: int
    mean_score: float | None
    pass_rate: float | None
    pass_rate_low: float | None
    pass_rate_high: float | None


class PeopleReport(BaseModel):
    """People's thumbs (feedback `quality`) in the window."""

    rated: int
    thumbs_up: int
    thumbs_up_share: float | None
    thumbs_up_share_low: float | None
    thumbs_up_share_high: float | None


class AgreementReport(BaseModel):
    """How often the judge's pass/fail matches the person's thumb, on runs with both."""

    matches: int
    n: int = Field(description="Runs with both a verdict and a thumb.")
    rate: float | None
    low: float | None = Field(description="95 % Wilson interval.")
    high: float | None
    kappa: float | None = Field(description="Cohen's kappa (agreement beyond chance).")


class EvaluationReport(EvaluationSettingOut):
    """The sampling rate and the report over a window."""

    window: Window
    pending: int = Field(description="Sampled runs the judge has not scored yet.")
    judge: JudgeReport
    people: PeopleReport
    agreement: AgreementReport


def window(since: datetime | None, until: datetime | None) -> tuple[str, str]:
    """Return the report's window in UTC ISO 8601 (default: the 30 days up to now).

    Raises:
        RequestValidationError: A time outside the years 1-9999 in UTC, or a window
            that ends before it starts.
    """
    try:
        end = until if until is not None else datetime.now(UTC)
        end = (end if end.tzinfo else end.replace(tzinfo=UTC)).astimezone(UTC)
        start = since if since is not None else end - DEFAULT_WINDOW
        start = (start if start.tzinfo else start.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "since"), "msg": "outside the years 1-9999"}]
        ) from None
    if start > end:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "since"), "msg": "since is after until"}]
        )
    return start.isoformat(timespec="microseconds"), end.isoformat(timespec="microseconds")


@router.put(
    "/assistants/{assistant_id}/evaluation",
    response_model=EvaluationSettingOut,
    summary="Set an assistant's online evaluation",
    dependencies=[WRITE],
)
async def set_evaluation(
    assistant_id: AssistantId, body: EvaluationIn, evaluation: EvaluationDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Set the share of the caller's live runs of the assistant that the judge scores."""
    setting = await evaluation.set_rate(owner, assistant_id, body.sample_rate)
    return setting.to_json()


@router.get(
    "/assistants/{assistant_id}/evaluation",
    response_model=EvaluationReport,
    summary="Read an assistant's online evaluation",
    dependencies=[READ],
)
async def get_evaluation(
    assistant_id: AssistantId,
    evaluation: EvaluationDep,
    owner: PrincipalDep,
    since: Annotated[
        datetime | None, Query(description="Window start (ISO 8601; default: 30 days ago).")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="Window end (ISO 8601; default: now).")
    ] = None,
) -> dict[str, Any]:
    """Return the rate and, over the window, the judge's and people's verdicts and agreement."""
    start, end = window(since, until)
    return await evaluation.report(owner, assistant_id, since=start, until=end)
