"""The critic: judge one attempt in three layers and decide where the run goes (PRODUCT.md §1.3).

1. **Code checks** (`code_checks`): `check_answer` on the body (long enough,
   no refusal, no error marker, not cut off) and `check_constraints` against the
   planner's constraints (title and body length by `count_chars`, tag count,
   image count, must-include / must-avoid terms, image files exist in
   `ctx.assets` and decode). Each check reports what it measured.
2. **Deviation** (`team_actions`): `KnowledgeCoordinator.check_deviation` over
   what the team did — the supervisor's guidance and focus areas (team_log),
   the creative brief and the generated post — against the injected notes. An
   ignored blocker note is REPLAN_REQUIRED: the attempt cannot pass, and while
   a replan is left (`ctx.max_replans` per run) the run goes back to the
   planner with the note; other ignored notes become feedback.
3. **LLM judge** (`JudgeVerdict`, today's date in its prompt) under
   `asyncio.wait_for(ctx.critic_timeout)`. When it fails, times out or answers
   something unreadable, the verdict rests on layers 1–2 and says
   `judge: "unavailable"`; its score is then the share of code checks passed.

Pass = every code check passes, no REPLAN_REQUIRED, and the judge (when
available) says `passed` with a score ≥ `ctx.critic_pass_threshold`. The
critic writes `attempt` (attempts judged so far), `verdict`, `attempts` (every
judged attempt with its post, for finalize), `retry_context` (what the next
attempt's team sees), `replans` and `replan_notes`; `route_from_critic` reads
them to route, and the critic announces its result in `critic.verdict`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from core.events import (
    AttemptCompleted,
    CheckReport,
    CriticVerdict,
    KnowledgeDeviation,
    emit,
    stage_events,
)
from graphs.context import AtelierContext, context_of
from graphs.pipeline_routing import attempts_left, route_from_critic
from graphs.state import PipelineState
from knowledge.deviation import AlertType, DeviationAlert
from knowledge.notes import NoteType
from nodes.checks import (
    CheckResult,
    answer_checks_as_results,
    check_answer,
    check_constraints,
    count_chars,
)
from nodes.common import structured_call
from nodes.planner import effective_request
from prompts import critic as prompt
from prompts.common import data_block, system_prompt

log = logging.getLogger(__name__)

VerdictLabel = Literal["passed", "needs_improvement", "failed"]

#: Answer checks whose failure makes an attempt `failed` rather than `needs_improvement`.
_ANSWER_CHECKS = frozenset({"answer_length", "refusal", "error_marker", "incomplete"})
SUMMARY_EXCERPT_CHARS = 160


class JudgeDimensions(BaseModel):
    """Per-dimension scores, 0–1 (a dimension the judge left out stays unscored)."""

    infoDensity: float | None = Field(default=None, ge=0, le=1, description="Information density.")
    textImageAlignment: float | None = Field(
        default=None, ge=0, le=1, description="Text/image match."
    )
    styleConsistency: float | None = Field(
        default=None, ge=0, le=1, description="Style consistency."
    )
    readability: float | None = Field(default=None, ge=0, le=1, description="Readability.")
    platformFit: float | None = Field(default=None, ge=0, le=1, description="Platform fit.")


class JudgeVerdict(BaseModel):
    """Return the verdict on the post."""

    verdict: VerdictLabel = Field(description="passed, needs_improvement or failed.")
    score: float = Field(ge=0, le=1, description="Overall score 0–1.")
    feedback: str = Field(default="", max_length=2000, description="Main problems, concretely.")
    suggestions: list[str] = Field(
        default_factory=list, max_length=10, description="Actionable changes."
    )
    dimensions: JudgeDimensions | None = Field(default=None, description="Scores per dimension.")


# ---------------------------------------------------------------------------
# Layer 1: code checks
# ---------------------------------------------------------------------------


def _image_ids(state: Mapping[str, Any]) -> list[str]:
    ids = [str(i) for i in state.get("generated_image_asset_ids") or []]
    if not ids:
        ids = [str(img.get("asset_id")) for img in state.get("images") or [] if img.get("asset_id")]
    return list(dict.fromkeys(ids))


def _asset_path(ctx: AtelierContext, asset_id: str) -> Path:
    """Return where an asset's bytes are, or a path that does not exist when they are not."""
    try:
        found = ctx.assets.path(asset_id)
    except ValueError:  # malformed id: certainly not a stored image
        found = None
    return found or ctx.assets.root / f"{asset_id}.missing"


def code_checks(state: Mapping[str, Any], ctx: AtelierContext) -> list[CheckResult]:
    """Run layer 1: the answer checks on the body, then the constraint checks."""
    content = dict(state.get("generated_content") or {})
    body = str(content.get("body") or "")
    results = answer_checks_as_results(check_answer(body), body)
    ids = _image_ids(state)
    paths = {str(_asset_path(ctx, asset_id)): asset_id for asset_id in ids}
    layout = state.get("layout_spec") or {}
    planned = layout.get("total_images")
    constraints = (state.get("intent") or {}).get("constraints") or {}
    for result in check_constraints(
        content,
        constraints,
        image_paths=list(paths) if ids else None,
        expected_images=planned if isinstance(planned, int) and ids else None,
    ):
        if result.name == "image_files":
            # Report asset ids, not server file paths.
            bad = [paths.get(str(p), str(p)) for p in result.measured or []]  # type: ignore[union-attr]
            result = result.model_copy(
                update={
                    "measured": bad,
                    "detail": f"missing or unreadable: {', '.join(bad)}" if bad else "",
                }
            )
        results.append(result)
    return results


# ---------------------------------------------------------------------------
# Layer 2: deviation
# ---------------------------------------------------------------------------


def team_actions(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Collect what the team did: supervisor guidance and focus areas, the brief, the post."""
    actions: list[dict[str, Any]] = []
    for entry in state.get("team_log") or []:
        if entry.get("guidance"):
            actions.append({"type": "supervisor_guidance", "content": entry["guidance"]})
        if entry.get("focus_areas"):
            actions.append({"type": "focus_areas", "content": list(entry["focus_areas"])})
    if state.get("creative_brief"):
        actions.append({"type": "creative_brief", "content": state["creative_brief"]})
    content = state.get("generated_content") or {}
    if content:
        post = {k: content.get(k) for k in ("title", "body", "tags")}
        actions.append({"type": "generated_content", "content": post})
    return actions


def _deviation_check(alert: DeviationAlert | None) -> CheckResult:
    replan = alert is not None and alert.alert_type is AlertType.REPLAN_REQUIRED
    return CheckResult(
        name="knowledge_deviation",
        passed=not replan,
        measured=alert.ignored_ids if alert else [],
        expected="every injected blocker note addressed",
        detail=alert.reason if alert else "",
    )


# ---------------------------------------------------------------------------
# Layer 3: LLM judge
# ---------------------------------------------------------------------------


def judge_messages(
    state: Mapping[str, Any], checks: Sequence[CheckResult], today: str
) -> list[Any]:
    """Build the judge's prompt: today's date, the request, constraints, post and check results."""
    intent = state.get("intent") or {}
    content = state.get("generated_content") or {}
    parts = [
        data_block("用户请求", effective_request(state)),
        data_block(
            "创作意图",
            {k: intent.get(k) for k in ("topic", "audience", "goal", "style", "rules")},
        ),
        data_block("可验证约束", intent.get("constraints") or {}),
        data_block("帖子", {k: content.get(k) for k in ("title", "body", "tags")}),
    ]
    images = [{"slot": img.get("slot"), "alt": img.get("alt")} for img in state.get("images") or []]
    if images:
        parts.append(data_block("配图", images))
    parts.append(
        data_block(
            "程序核验",
            [
                {
                    "check": c.name,
                    "passed": c.passed,
                    "measured": c.measured,
                    "expected": c.expected,
                }
                for c in checks
            ],
        )
    )
    platform = str(intent.get("platform") or state.get("platform") or "xiaohongshu")
    return [
        SystemMessage(system_prompt(prompt.SYSTEM.format(platform=platform, today=today))),
        HumanMessage(prompt.TASK.format(context="\n\n".join(parts))),
    ]


async def run_judge(ctx: AtelierContext, messages: Sequence[Any]) -> JudgeVerdict | None:
    """Ask the judge under `ctx.critic_timeout`; None when it fails, times out or is unreadable."""
    model = ctx.models("critic")
    try:
        return await asyncio.wait_for(
            structured_call(model, JudgeVerdict, messages), timeout=ctx.critic_timeout
        )
    except GraphBubbleUp:
        raise
    except TimeoutError:
        log.warning("critic judge timed out after %.1fs", ctx.critic_timeout)
    except Exception:
        log.warning("critic judge failed", exc_info=True)
    return None


# ---------------------------------------------------------------------------
# Decision
# ---------------------------------------------------------------------------


def best_attempt(attempts: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Return the best judged attempt: fewest failing checks, then highest score, then earliest."""
    candidates = [a for a in attempts if a.get("post")]
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda a: (
            int(a.get("failing_checks") or 0),
            -float(a.get("score") or 0.0),
            a["attempt"],
        ),
    )


def _summary(content: Mapping[str, Any], images: int, score: float) -> str:
    body = str(content.get("body") or "")
    excerpt = body.strip().replace("\n", " ")[:SUMMARY_EXCERPT_CHARS]
    tags = " ".join(f"#{t}" for t in content.get("tags") or [])
    return (
        f"标题：{content.get('title') or '（无）'}；正文 {count_chars(body)} 字，开头：{excerpt}；"
        f"标签：{tags or '（无）'}；图片 {images} 张；得分 {score:.2f}"
    )


def _reasons(
    failing: Sequence[CheckResult],
    judge: JudgeVerdict | None,
    threshold: float,
    alert: DeviationAlert | None,
) -> list[str]:
    reasons = [f"{c.name}: {c.detail or 'failed'}" for c in failing]
    if alert is not None:
        reasons.append(f"knowledge notes: {alert.reason}")
    if judge is not None:
        if judge.verdict != "passed":
            reasons.append(f"judge verdict: {judge.verdict}")
        if judge.score < threshold:
            reasons.append(f"judge score {judge.score:.2f} < threshold {threshold:.2f}")
    return reasons


async def critic(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Judge the attempt, record it, and decide: finalize, retry from rag, or replan."""
    ctx = context_of(runtime)
    writer = runtime.stream_writer
    attempt = int(state.get("attempt") or 0) + 1
    max_attempts = max(int(state.get("max_attempts") or 1), attempt)
    threshold = ctx.critic_pass_threshold
    with stage_events(writer, "critic", attempt):
        content = dict(state.get("generated_content") or {})
        body = str(content.get("body") or "")
        failure = state.get("failure")
        checks: list[CheckResult] = []
        alert: DeviationAlert | None = None
        judge: JudgeVerdict | None = None
        judge_status: Literal["ok", "unavailable", "skipped"] = "skipped"

        if failure is None:
            checks = code_checks(state, ctx)
            notes = state.get("knowledge_notes") or []
            if notes:
                alert = ctx.coordinator.check_deviation(
                    str(state.get("session_id") or "run"), team_actions(state), notes
                )
                if alert is not None:
                    emit(
                        writer,
                        KnowledgeDeviation(
                            alert_type=alert.alert_type.value,
                            severity=alert.severity.value,
                            ignored_notes=alert.ignored_ids,
                            reason=alert.reason,
                        ),
                    )
                checks.append(_deviation_check(alert))
            if body.strip():
                messages = judge_messages(state, checks, ctx.today().isoformat())
                judge = await run_judge(ctx, messages)
                judge_status = "ok" if judge is not None else "unavailable"

        failing = [c for c in checks if not c.passed]
        replan_required = alert is not None and alert.alert_type is AlertType.REPLAN_REQUIRED
        if judge is not None:
            score = round(judge.score, 4)
        elif checks:
            score = round(sum(c.passed for c in checks) / len(checks), 4)
        else:
            score = 0.0
        judge_passes = judge is not None and judge.verdict == "passed" and judge.score >= threshold
        # Without a judge the code checks decide, and the verdict says so (judge: unavailable).
        passed = (
            failure is None
            and bool(checks)
            and not failing
            and (judge_passes or judge_status == "unavailable")
        )
        if passed:
            label: VerdictLabel = "passed"
        elif (
            failure is not None
            or any(c.name in _ANSWER_CHECKS for c in failing)
            or (judge is not None and judge.verdict == "failed")
        ):
            label = "failed"
        else:
            label = "needs_improvement"

        feedback_parts: list[str] = []
        if failure is not None:
            feedback_parts.append(str(failure.get("message") or ""))
        if judge is not None and judge.feedback:
            feedback_parts.append(judge.feedback.strip())
        if alert is not None:
            feedback_parts.append(alert.message)
        feedback_parts.extend(f"{c.name}: {c.detail}" for c in failing if c.detail)
        feedback = "\n".join(p for p in feedback_parts if p)
        suggestions = list(judge.suggestions) if judge is not None else []
        dimensions = (
            judge.dimensions.model_dump(exclude_none=True) if judge and judge.dimensions else {}
        )
        reasons = _reasons(failing, judge, threshold, alert)
        if judge_status == "unavailable":
            reasons.append("judge unavailable: decided on the code checks alone")

        replans = int(state.get("replans") or 0)
        replan = (
            not passed
            and failure is None
            and replan_required
            and replans < ctx.max_replans
            and attempt < max_attempts
        )
        images = list(state.get("images") or [])
        record = {
            "attempt": attempt,
            "verdict": label,
            "passed": passed,
            "score": score,
            "feedback": feedback,
            "judge": judge_status,
            "dimensions": dimensions,
            "checks": [c.model_dump(mode="json") for c in checks],
            "failing_checks": len(failing),
            "post": {k: content.get(k) for k in ("title", "body", "tags")} if body else None,
            "body_blocks": list(state.get("body_blocks") or []),
            "images": images,
        }
        verdict = {
            "verdict": label,
            "passed": passed,
            "replan": replan,
            "score": score,
            "threshold": threshold,
            "checks": record["checks"],
            "feedback": feedback,
            "suggestions": suggestions,
            "dimensions": dimensions,
            "judge": judge_status,
            "reasons": reasons,
        }
        update: dict[str, Any] = {
            "attempt": attempt,
            "max_attempts": max_attempts,
            "verdict": verdict,
            "attempts": [*(state.get("attempts") or []), record],
            "retry_context": {
                "review_verdict": label,
                "review_feedback": "\n".join([feedback, *suggestions]).strip(),
                "review_reason": "; ".join(reasons),
                "verified_items": [
                    f"{c.name}: {c.measured}" if c.measured not in (None, []) else c.name
                    for c in checks
                    if c.passed
                ],
                "previous_attempt_summary": _summary(content, len(images), score),
            },
            "replans": replans + 1 if replan else replans,
            "replan_notes": (
                [
                    {"id": n.id, "type": n.type.value, "content": n.content}
                    for n in alert.ignored_notes
                    if n.type is NoteType.BLOCKER
                ]
                if replan and alert is not None
                else []
            ),
        }
        next_stage = route_from_critic({**state, **update})
        exhausted = not passed and failure is None and attempts_left({**state, **update}) == 0
        verdict.update(next=next_stage, exhausted=exhausted)

        emit(
            writer,
            CriticVerdict(
                verdict=label,
                passed=passed,
                score=score,
                threshold=threshold,
                checks=[CheckReport(**c) for c in record["checks"]],
                feedback=feedback,
                suggestions=suggestions,
                dimensions=dimensions,
                judge=judge_status,
                attempt=attempt,
                max_attempts=max_attempts,
                exhausted=exhausted,
                next=next_stage,
            ),
        )
        emit(writer, AttemptCompleted(attempt=attempt, max_attempts=max_attempts, verdict=label))
        return update
