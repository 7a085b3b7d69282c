"""Experiments: a dataset run on two or more arms, checked by code and judged in pairs.

    POST   /experiments                 start one: a dataset, arms, repetitions, concurrency
    POST   /experiments/search          the caller's experiments, newest first
    GET    /experiments/{x}             status, progress, summary per arm, results per example
    GET    /experiments/{x}/stream      progress as Server-Sent Events (`metadata` … `end`)
    POST   /experiments/{x}/cancel      stop it: no run starts any more, running ones cancelled
    DELETE /experiments/{x}             cancel it, then delete it (its runs stay)

An arm is an assistant (`atelier`, or a preset the caller created, at a version), with
a model per LLM role optionally. Every example runs on every arm as an ordinary run
(listed with the experiment's metadata), each post is checked by code, and every pair
of arms is compared by the `judge` model role in both orders (a win only when both
orders agree). An experiment belongs to the API key that made it; another key gets
404 and never sees it listed. See docs/evaluate.md.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.access import READ, WRITE
from app.deps import ExperimentsDep, PrincipalDep, SettingsDep
from app.schemas import DIGITS_ONLY, ID_PATTERN, MAX_OFFSET, search_metadata
from app.sse import HEARTBEAT, SSE_HEADERS, DisconnectAwareResponse, parse_cursor
from engine import (
    DEFAULT_CONCURRENCY,
    MAX_ARMS,
    MAX_CONCURRENCY,
    MAX_REPETITIONS,
    MIN_ARMS,
    Arm,
    ExperimentRecord,
    ExperimentsService,
    ExperimentStatus,
    Frame,
)

router = APIRouter(tags=["experiments"])

ExperimentId = Annotated[str, Path(pattern=ID_PATTERN, description="Experiment id.")]
Role = Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,64}$")]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=20,
        description="Id of the last frame the client has; the stream resumes after it.",
    ),
]
STREAM_EXAMPLE = (
    "id: 1\nevent: metadata\n"
    'data: {"experiment_id":"7c1e…","dataset_id":"d2a9…","status":"pending",'
    '"arms":["v2","v3"],"runs_total":8,"pairs_total":4}\n\n'
    'id: 2\nevent: status\ndata: {"status":"running"}\n\n'
    "id: 3\nevent: run\n"
    'data: {"example_index":0,"arm":"v2","repetition":0,"run_id":"…","status":"running"}\n\n'
    "id: 20\nevent: judgement\n"
    'data: {"example_index":0,"repetition":0,"arms":["v2","v3"],"winner":"v3",'
    '"agreed":true,"unavailable":false,"run_id":"…"}\n\n'
    'id: 31\nevent: summary\ndata: {"arms":[…],"judge":{…}}\n\n'
    'id: 32\nevent: end\ndata: {"status":"success","error":null}\n\n'
)


class ExperimentFrame(BaseModel):
    """One Server-Sent Events frame of an experiment's progress stream."""

    id: str = Field(pattern=r"^[1-9][0-9]*$", description="The frame's number.")
    event: Literal["metadata", "status", "run", "judgement", "summary", "end"]
    data: dict[str, Any]


STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id:` (the experiment's frame number), `event:` "
        "and JSON `data:`; `metadata` first, then `status`, `run` (a run started or ended), "
        "`judgement` (a pair judged), `summary`, and `end` last; `: heartbeat` comments "
        "while idle. Send Last-Event-ID to resume after a frame.",
        "content": {
            "text/event-stream": {
                "schema": ExperimentFrame.model_json_schema(),
                "example": STREAM_EXAMPLE,
            }
        },
    }
}


class ArmIn(BaseModel):
    """One configuration to compare."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(strip_whitespace=True, max_length=64)] | None = Field(
        default=None,
        description="How the summary names it (default: the assistant id, with @v<n> when "
        "a version is given).",
        examples=["v3"],
    )
    assistant_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="A built-in assistant (`atelier`) or a preset the caller created.",
        examples=["atelier"],
    )
    version: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        strict=True,
        description="The preset's version (default: its latest, pinned when the "
        "experiment is created).",
    )
    models: dict[Role, ModelName] | None = Field(
        default=None,
        max_length=16,
        description='A model per LLM role for this arm\'s runs (e.g. {"writer_agent": '
        '"gpt-4o-mini"}); other roles use the deployment\'s.',
    )


class ExperimentCreate(BaseModel):
    """Body of `POST /experiments`."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)] = Field(
        description="The caller's dataset."
    )
    arms: list[ArmIn] = Field(
        min_length=MIN_ARMS,
        max_length=MAX_ARMS,
        description=f"{MIN_ARMS}–{MAX_ARMS} configurations to compare.",
    )
    repetitions: int = Field(
        default=1,
        ge=1,
        le=MAX_REPETITIONS,
        strict=True,
        description="Runs of each example on each arm.",
    )
    max_concurrency: int = Field(
        default=DEFAULT_CONCURRENCY,
        ge=1,
        le=MAX_CONCURRENCY,
        strict=True,
        description="Runs (the arms' and the judge's) in flight at once.",
    )
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    metadata: Annotated[dict[str, Any], AfterValidator(search_metadata)] | None = Field(
        default=None, description="Free-form labels (at most 64 keys, 16 KiB of JSON)."
    )


class ExperimentSearch(BaseModel):
    """Body of `POST /experiments/search`."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)] | None = None
    status: ExperimentStatus | None = None
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET, strict=True)


class ArmOut(BaseModel):
    """An arm, as the experiment runs it."""

    name: str
    assistant_id: str
    version: int | None = Field(description="The preset's version its runs use (null: built-in).")
    models: dict[str, str]


class Progress(BaseModel):
    """How far an experiment has got."""

    examples: int
    runs_total: int
    runs_done: int
    pairs_total: int
    pairs_done: int


class ExperimentOut(BaseModel):
    """An experiment."""

    experiment_id: str
    dataset_id: str
    name: str | None
    status: Literal["pending", "running", "success", "error", "cancelled"]
    arms: list[ArmOut]
    repetitions: int
    max_concurrency: int
    metadata: dict[str, Any]
    progress: Progress
    error: str | None
    created_at: str
    updated_at: str
    finished_at: str | None


class Versus(BaseModel):
    """An arm's record against one other arm."""

    arm: str
    wins: int
    ties: int
    losses: int
    win_rate: float | None
    win_rate_low: float | None
    win_rate_high: float | None


class ArmSummary(ArmOut):
    """What an arm achieved (so far)."""

    runs: int = Field(description="Its runs that ended.")
    posts: int = Field(description="Of those, the ones that wrote a post.")
    passed: int = Field(description="Posts passing every code check.")
    pass_rate: float | None = Field(description="passed / runs (a run without a post fails).")
    pass_rate_low: float | None
    pass_rate_high: float | None
    wins: int = Field(description="Pairs won against every other arm (both orders agreed).")
    ties: int
    losses: int
    win_rate: float | None = Field(description="(wins + ties / 2) / pairs, with its 95 % interval.")
    win_rate_low: float | None
    win_rate_high: float | None
    against: list[Versus] = Field(description="The same against each other arm.")
    critic_score: float | None = Field(description="The critic's mean score of its posts.")
    cost: float | None = Field(description="The LLM cost of its runs (null: unknown).")
    cost_per_post: float | None
    seconds_per_post: float | None
    calls: int = Field(description="LLM calls of its runs.")
    prompt_tokens: int | None
    completion_tokens: int | None


class JudgeSummary(BaseModel):
    """What the pairwise judge did."""

    pairs: int
    judged: int
    agreed: int = Field(description="Pairs whose two orders agreed.")
    unavailable: int = Field(description="Pairs an order had no usable answer for (ties).")
    calls: int
    cost: float | None


class Summary(BaseModel):
    """The summary per arm, and the judge's."""

    arms: list[ArmSummary]
    judge: JudgeSummary


class ExampleResult(BaseModel):
    """One example: its brief, the posts side by side, and the judged pairs with reasons."""

    model_config = ConfigDict(extra="allow")

    example_index: int
    example_id: str
    input: dict[str, Any]
    expectations: dict[str, Any] | None
    posts: list[dict[str, Any]] = Field(
        description="Per arm and repetition: status, run_id, thread_id, post, passed, "
        "failing checks, critic_score, cost, seconds, calls."
    )
    pairs: list[dict[str, Any]] = Field(
        description="Per pair of arms and repetition: winner (an arm's name or tie), "
        "agreed, unavailable, orders (each order's answer and reasons), run_id."
    )


class ExperimentDetail(ExperimentOut):
    """An experiment with its summary so far and a page of its results."""

    summary: Summary
    results: list[ExampleResult]
    results_total: int = Field(description="Examples in all (page with offset and limit).")


def _out(experiment: ExperimentRecord) -> dict[str, Any]:
    return experiment.to_json()


@router.post(
    "/experiments",
    response_model=ExperimentOut,
    summary="Start an experiment",
    responses={404: {"description": "The dataset, or an arm's assistant or version, is unknown."}},
    dependencies=[WRITE],
)
async def create_experiment(
    body: ExperimentCreate, experiments: ExperimentsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Run a dataset on two or more arms; the experiment goes on after the answer."""
    arms = [
        Arm(
            name=arm.name or "",
            assistant_id=arm.assistant_id,
            version=arm.version,
            models=dict(arm.models or {}),
        )
        for arm in body.arms
    ]
    experiment = await experiments.create(
        owner,
        dataset_id=body.dataset_id,
        arms=arms,
        repetitions=body.repetitions,
        max_concurrency=body.max_concurrency,
        name=body.name,
        metadata=body.metadata,
    )
    return _out(experiment)


@router.post(
    "/experiments/search",
    response_model=list[ExperimentOut],
    summary="Search experiments",
    dependencies=[READ],
)
async def search_experiments(
    body: ExperimentSearch, experiments: ExperimentsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's experiments, newest first."""
    found = await experiments.search(
        owner,
        dataset_id=body.dataset_id,
        status=body.status,
        limit=body.limit,
        offset=body.offset,
    )
    return [_out(e) for e in found]


@router.get(
    "/experiments/{experiment_id}",
    response_model=ExperimentDetail,
    summary="Get an experiment",
    dependencies=[READ],
)
async def get_experiment(
    experiment_id: ExperimentId,
    experiments: ExperimentsDep,
    owner: PrincipalDep,
    offset: Annotated[
        int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query(description="Examples to skip.")
    ] = 0,
    limit: Annotated[
        int, Field(ge=1, le=100), DIGITS_ONLY, Query(description="Examples of results.")
    ] = 20,
) -> dict[str, Any]:
    """Return the experiment, its summary so far and a page of its results per example."""
    return await experiments.detail(owner, experiment_id, offset=offset, limit=limit)


@router.post(
    "/experiments/{experiment_id}/cancel",
    response_model=ExperimentOut,
    summary="Cancel an experiment",
    dependencies=[WRITE],
)
async def cancel_experiment(
    experiment_id: ExperimentId, experiments: ExperimentsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Stop starting runs and cancel the running ones; an ended experiment stays as it is."""
    return _out(await experiments.cancel(owner, experiment_id))


@router.delete(
    "/experiments/{experiment_id}",
    status_code=204,
    summary="Delete an experiment",
    dependencies=[WRITE],
)
async def delete_experiment(
    experiment_id: ExperimentId, experiments: ExperimentsDep, owner: PrincipalDep
) -> Response:
    """Cancel the experiment's remaining runs and delete it (the runs it made stay)."""
    await experiments.delete(owner, experiment_id)
    return Response(status_code=204)


async def _frames(
    experiments: ExperimentsService, owner: str, experiment_id: str, after: int, heartbeat: float
) -> Any:
    async for item in experiments.follow(owner, experiment_id, after=after, idle=heartbeat):
        yield item.encode() if isinstance(item, Frame) else HEARTBEAT


@router.get(
    "/experiments/{experiment_id}/stream",
    summary="Follow an experiment's progress",
    response_class=DisconnectAwareResponse,
    responses=STREAM_RESPONSES,
    dependencies=[READ],
)
async def stream_experiment(
    experiment_id: ExperimentId,
    experiments: ExperimentsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    last_event_id_header: LastEventId = None,
    last_event_id: Annotated[
        str | None, Query(max_length=20, description="Same as the Last-Event-ID header.")
    ] = None,
) -> DisconnectAwareResponse:
    """Replay the experiment's frames after the cursor, then follow it until its `end`."""
    try:
        after = parse_cursor(last_event_id_header, last_event_id)
    except ValueError as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("header", "Last-Event-ID"), "msg": str(exc)}]
        ) from None
    await experiments.get(owner, experiment_id)  # 404 before the stream starts
    body = _frames(experiments, owner, experiment_id, after, settings.sse_heartbeat_interval)
    return DisconnectAwareResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
