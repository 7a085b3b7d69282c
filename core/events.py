"""Typed pipeline events, streamed in LangGraph's `custom` mode (PRODUCT.md §2.3).

Nodes build one of these models and hand it to `emit`, which writes its JSON form
to the run's stream writer. The HTTP layer lists the `PipelineEvent` union in its
OpenAPI document, so clients see exactly what the stream carries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FallbackReason = Literal["precondition", "quality", "cap", "invalid_decision"]
#: The critic's verdict on an attempt: the LLM judge's three labels, or `not_judged` when the
#: judge failed or timed out on an attempt whose code checks all pass (no score, no pass).
VerdictLabel = Literal["passed", "needs_improvement", "failed", "not_judged"]


class _Event(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class StageStarted(_Event):
    """A pipeline node started."""

    type: Literal["stage.started"] = "stage.started"
    stage: str = Field(description="Pipeline node name.", examples=["planner"])
    attempt: int = Field(ge=0, description="Attempt number (0 before the first attempt).")


class StageCompleted(_Event):
    """A pipeline node finished."""

    type: Literal["stage.completed"] = "stage.completed"
    stage: str = Field(description="Pipeline node name.", examples=["critic"])
    attempt: int = Field(ge=0, description="Attempt number.")
    duration_ms: float = Field(ge=0, description="Wall time of the node in milliseconds.")


class AttemptStarted(_Event):
    """An executor → critic cycle started."""

    type: Literal["attempt.started"] = "attempt.started"
    attempt: int = Field(ge=1, description="1-based attempt number.")
    max_attempts: int = Field(ge=1, description="1 + MAX_RETRY_COUNT.")


class AttemptCompleted(_Event):
    """An executor → critic cycle ended with the critic's verdict."""

    type: Literal["attempt.completed"] = "attempt.completed"
    attempt: int = Field(ge=1)
    max_attempts: int = Field(ge=1)
    verdict: VerdictLabel = Field(description="Critic verdict.", examples=["passed"])


class InjectedNote(_Event):
    """A knowledge note put into the team's context."""

    id: str
    type: str = Field(examples=["blocker"])
    score: float = Field(ge=0, le=1)


class KnowledgeInjected(_Event):
    """Retrieval injected vault notes for this attempt."""

    type: Literal["knowledge.injected"] = "knowledge.injected"
    query: str
    notes: list[InjectedNote]


class SupervisorRoute(_Event):
    """The supervisor decided which agent runs next."""

    type: Literal["supervisor.route"] = "supervisor.route"
    next_agent: str = Field(description="The agent the supervisor asked for.")
    guidance: str = ""
    focus_areas: list[str] = Field(default_factory=list)
    step: int = Field(ge=1, description="1-based supervisor decision number in this team run.")
    parallel_agents: list[str] = Field(
        default_factory=list,
        description="Agents started together with next_agent (a parallel step).",
    )
    plan: list[list[str]] = Field(
        default_factory=list,
        description="The steps planned after this one, each the agents run together.",
    )
    planned: bool = Field(
        default=False,
        description="The step came from the supervisor's plan: no supervisor call was made.",
    )


class AgentFallback(_Event):
    """Routing overrode the supervisor's choice."""

    type: Literal["agent.fallback"] = "agent.fallback"
    from_: str = Field(alias="from", description="What the supervisor asked for.")
    to: str = Field(description="Where the run actually goes.")
    reason: FallbackReason
    detail: str = ""


class KnowledgeDeviation(_Event):
    """The critic found injected notes the team ignored."""

    type: Literal["knowledge.deviation"] = "knowledge.deviation"
    alert_type: str = Field(examples=["replan_required"])
    severity: str = Field(examples=["high"])
    ignored_notes: list[str] = Field(description="Ids of the ignored notes.")
    reason: str = ""


class CheckReport(_Event):
    """One check of the critic."""

    name: str
    passed: bool
    measured: Any = None
    expected: str | None = None
    detail: str = ""


class CriticVerdict(_Event):
    """The critic's decision on one attempt."""

    type: Literal["critic.verdict"] = "critic.verdict"
    verdict: VerdictLabel = Field(
        examples=["needs_improvement"],
        description="not_judged: the judge was unavailable and every code check passed; the "
        "attempt is not passed and carries no score.",
    )
    passed: bool = Field(description="Only a judge's passed verdict at the threshold passes.")
    score: float | None = Field(
        ge=0, le=1, description="The judge's score; null when no judge gave one.", examples=[0.82]
    )
    threshold: float = Field(ge=0, le=1)
    checks: list[CheckReport] = Field(default_factory=list)
    feedback: str = ""
    suggestions: list[str] = Field(default_factory=list)
    dimensions: dict[str, float] = Field(
        default_factory=dict, description="The judge's per-dimension scores (0–1)."
    )
    judge: Literal["ok", "unavailable", "skipped"] = Field(
        default="ok",
        description="ok: the LLM judge answered; unavailable: it failed or timed out, the "
        "verdict rests on the code checks and has no score; skipped: there was nothing to judge.",
    )
    attempt: int = Field(ge=1)
    max_attempts: int = Field(ge=1)
    exhausted: bool = Field(default=False, description="No attempts are left after this one.")
    next: Literal["finalize", "rag", "planner"]


class AssetCreated(_Event):
    """An image was generated and stored."""

    type: Literal["asset.created"] = "asset.created"
    asset_id: str
    url: str = Field(examples=["/assets/3f2a…"])
    slot: int = Field(ge=1)


PipelineEvent = Annotated[
    StageStarted
    | StageCompleted
    | AttemptStarted
    | AttemptCompleted
    | KnowledgeInjected
    | SupervisorRoute
    | AgentFallback
    | KnowledgeDeviation
    | CriticVerdict
    | AssetCreated,
    Field(discriminator="type"),
]

StreamWriter = Callable[[Any], None]


def emit(writer: StreamWriter | None, event: _Event) -> None:
    """Write an event's JSON form to a LangGraph stream writer (no-op without one)."""
    if writer is not None:
        writer(event.model_dump(mode="json", by_alias=True))


@dataclass
class StageClock:
    """The running stage of `stage_events`; a node may correct the attempt it reports."""

    attempt: int


@contextmanager
def stage_events(writer: StreamWriter | None, stage: str, attempt: int) -> Iterator[StageClock]:
    """Emit `stage.started` now and `stage.completed` with the duration when the body ends.

    Nothing is emitted on the way out when the body raises (an error, or a LangGraph
    interrupt that re-runs the node on resume): the stage did not complete.
    """
    emit(writer, StageStarted(stage=stage, attempt=attempt))
    clock = StageClock(attempt)
    started = time.perf_counter()
    yield clock
    duration = round((time.perf_counter() - started) * 1000, 3)
    emit(writer, StageCompleted(stage=stage, attempt=clock.attempt, duration_ms=duration))
