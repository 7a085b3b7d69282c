"""The review agent: judges the draft on five quality dimensions before the team may end.

The model's judgement is combined with facts code can check: the draft is
measured against the planner's constraints (`agentkit.checks.check_constraints`),
its platform's rules (`agentkit.platform_checks.check_platform`) and the
advertising-law words (`agentkit.compliance.check_compliance`),
the failures are shown to the model and added to the issues, and the review is
approved only if the model approves, no constraint fails and every dimension
it scored reaches the quality threshold.
"""

from __future__ import annotations

from typing import Annotated, Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.checks import CheckResult, check_constraints
from agentkit.common import (
    QualityDimensions,
    UnitScore,
    agent_error,
    build_messages,
    clear_agent_error,
    clipped,
    parse_constraints,
    structured_call,
)
from agentkit.compliance import check_compliance
from agentkit.context import AtelierContext, context_of
from agentkit.limits import limits_of
from agentkit.platform_checks import check_platform
from agentkit.post import DEFAULT_PLATFORM
from agentkit.routing import draft_digest, quality_fallback
from agentkit.state import QUALITY_DIMENSIONS, TeamState
from prompts import review as prompt
from prompts.common import data_block

AGENT = "review_agent"
SECTIONS = (
    "request",
    "constraints",
    "notes",
    "retry",
    "brief",
    "evidence",
    "references",
    "layout",
    "plans",
    "content",
    "images",
)


class ReviewResult(BaseModel):
    """Return the review of the draft."""

    approved: bool = Field(default=False, description="Whether the post can be published.")
    score: UnitScore = Field(default=0.0, description="Overall score 0–1.")
    issues: Annotated[list[str], clipped(10)] = Field(
        default_factory=list, max_length=10, description="Problems found."
    )
    suggestions: Annotated[list[str], clipped(10)] = Field(
        default_factory=list, max_length=10, description="Concrete fixes."
    )
    dimensions: QualityDimensions = Field(
        default_factory=QualityDimensions, description="Per-dimension scores 0–1."
    )


def constraint_failures(state: TeamState) -> list[CheckResult]:
    """Return the constraints, platform rules and advertising-law words the draft breaks.

    Text only: images are drawn later or elsewhere, so image counts are left to the
    critic.
    """
    rules = parse_constraints(state.get("constraints"))
    text_rules = rules.model_copy(update={"image_min": None, "image_max": None})
    content = state.get("generated_content") or {}
    platform = state.get("platform") or DEFAULT_PLATFORM
    results = [
        *check_constraints(content, text_rules),
        *check_platform(content, platform),
        *check_compliance(content, platform),
    ]
    return [r for r in results if not r.passed]


def _failure_text(result: CheckResult) -> str:
    text = f"{result.name}: 实测 {result.measured}，要求 {result.expected}"
    return f"{text}（{result.detail}）" if result.detail else text


async def review_agent(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Write `review_feedback`, `quality_scores` and `reviewed_digest` (the draft it judged)."""
    ctx = context_of(runtime)
    threshold = limits_of(state)["quality_threshold"]
    failures = constraint_failures(state)
    checks = [_failure_text(f) for f in failures]
    task = "\n\n".join([data_block(prompt.CHECKS_LABEL, checks or ["全部通过"]), prompt.TASK])
    system = prompt.SYSTEM.format(threshold=threshold)
    messages = build_messages(system, state, SECTIONS, AGENT, task=task)
    result = await structured_call(ctx.models(AGENT), ReviewResult, messages)
    if result is None:
        return agent_error(state, AGENT, "no ReviewResult")

    scores = {
        name: value
        for name in QUALITY_DIMENSIONS
        if (value := getattr(result.dimensions, name)) is not None
    }
    approved = result.approved and not failures and quality_fallback(scores, threshold) is None
    feedback = {
        "approved": approved,
        "score": result.score,
        "issues": [*checks, *(i for i in result.issues if i not in checks)],
        "suggestions": result.suggestions,
    }
    return {
        "review_feedback": feedback,
        "quality_scores": scores,
        "reviewed_digest": draft_digest(state),
        **clear_agent_error(state, AGENT),
    }
