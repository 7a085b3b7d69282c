"""The critic: judge one attempt in three layers and decide where the run goes (PRODUCT.md §1.3).

1. **Code checks** (`code_checks`): `check_answer` on the body (long enough,
   no refusal, no error marker, not cut off), `check_prose` (no prompt markup
   in title, body, tags or card text, a body not mostly code or JSON, tags
   where the platform expects them) and `check_constraints` against the
   planner's constraints (title and body length by `count_chars`, tag count,
   image count, must-include / must-avoid terms, image files exist in
   `ctx.assets` and decode), `check_platform` against the post's platform's rules
   (`agentkit.platform_checks`: lengths as the platform counts them, tags, images,
   headings, a script's shots, a thread's posts) and `check_compliance` for the
   words the advertising law and the platform forbid (`agentkit.compliance`:
   title, body, tags and card text). Each check reports what it measured.
2. **Deviation** (`team_actions`): `KnowledgeCoordinator.check_deviation` over
   what the team's models did — the supervisor's guidance and focus areas
   (team_log), the fields of the creative brief the model wrote (not the
   `house_rules` code copies the notes into), the generated post and the image
   prompts — against the injected notes. An ignored blocker note is
   REPLAN_REQUIRED: the attempt cannot pass, and while a replan is left
   (`ctx.max_replans` per run) the run goes back to the planner with the note;
   other ignored notes become feedback.
3. **LLM judge** (`JudgeVerdict`, today's date in its prompt) under
   `asyncio.wait_for(ctx.critic_timeout)`. Its scores are `UnitScore`s, read
   leniently like the review's (``7`` on a 1–10 habit is 0.7). When it fails,
   times out or answers something unreadable, the verdict rests on layers 1–2,
   says `judge: "unavailable"` and carries **no score** (None): no score is
   ever reported that no judge gave.

Pass = every code check passes, no REPLAN_REQUIRED, and the judge says
`passed` with a score ≥ the threshold — never without a judge. The threshold is
the run's brand preset's `critic_pass_threshold` when it sets one, else
`ctx.critic_pass_threshold` (`pass_threshold`); the judge is shown the brand's name
and voice too. A brand's `must_avoid` terms reach the constraints (`agentkit.brand`),
so a post using one fails layer 1's `must_avoid` check.

Without a judge (decision, written down where PRODUCT.md §1.3 is silent): a
failing code check still makes the attempt `failed` / `needs_improvement` and
the run retries as usual. When every code check passes the verdict is
`not_judged` (`passed: false`, `score: None`): there is nothing another attempt
could be told to fix, so the run finalizes with this post as outcome
`completed`, and the result, the console and the CLI show it as not judged
(未评审), never as passed with a score.

Who made the attempt (`source`, kept in its record and its verdict): `team` when
the executor stamped the draft (`draft_source`), `card` when `nodes.redraw_card`
drew one card again, and `edit` when neither did since the critic last reset
`draft_source` to None — the draft came in by a state update, a person's edit. A
revision (`edit`, `card`) is judged like any attempt but never replans, and the
run then finalizes whatever the verdict (`agentkit.pipeline_routing.route_from_critic`):
a team attempt would rewrite what the person changed. Each record also keeps the
attempt's image plans, so a card of an earlier attempt that finalize publishes can
be drawn again.

The critic writes `attempt` (attempts judged so far), `verdict`, `attempts` (every
judged attempt with its post, for finalize), `retry_context` (what the next
attempt's team sees), `replans` and `replan_notes`; `route_from_critic` reads
them to route, and the critic announces its result in `critic.verdict`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.checks import (
    CheckResult,
    answer_checks_as_results,
    check_answer,
    check_constraints,
    check_prose,
    count_chars,
)
from agentkit.common import QualityDimensions, UnitScore, structured_call
from agentkit.compliance import check_compliance
from agentkit.context import AtelierContext, context_of
from agentkit.pipeline_routing import NOT_JUDGED, attempts_left, route_from_critic
from agentkit.platform_checks import check_platform
from agentkit.post import BRIEF_WRITTEN_FIELDS, effective_request, post_platform
from agentkit.state import PipelineState
from agentkit.tools import image_request
from core.events import (
    AttemptCompleted,
    CheckReport,
    CriticVerdict,
    KnowledgeDeviation,
    VerdictLabel,
    emit,
    stage_events,
)
from knowledge.deviation import AlertType, DeviationAlert
from knowledge.notes import NoteType
from prompts import critic as prompt
from prompts.common import data_block, system_prompt

log = logging.getLogger(__name__)

#: Who made an attempt: the team (executor), a card redraw, or a person's edit.
AttemptSource = Literal["team", "card", "edit"]
#: What the judge may answer.
JudgeLabel = Literal["passed", "needs_improvement", "failed"]

#: Checks whose failure makes an attempt `failed` rather than `needs_improvement`: the
#: answer is no real answer, or not prose for people (leaked prompt markup, code, JSON).
_ANSWER_CHECKS = frozenset(
    {"answer_length", "refusal", "error_marker", "incomplete", "data_markup", "code_share"}
)
SUMMARY_EXCERPT_CHARS = 160


class JudgeVerdict(BaseModel):
    """Return the verdict on the post."""

    verdict: JudgeLabel = Field(description="passed, needs_improvement or failed.")
    score: UnitScore = Field(description="Overall score 0–1.")
    feedback: str = Field(default="", max_length=2000, description="Main problems, concretely.")
    suggestions: list[str] = Field(
        default_factory=list, max_length=10, description="Actionable changes."
    )
    dimensions: QualityDimensions | None = Field(default=None, description="Scores per dimension.")


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


def card_texts(state: Mapping[str, Any]) -> list[str]:
    """Return the text the image cards of the drawn slots show (headline and body of each)."""
    drawn = {img.get("slot") for img in state.get("images") or []}
    texts: list[str] = []
    for plan in state.get("image_plans") or []:
        if plan.get("slot") in drawn:
            try:
                request = image_request(plan, state)
            except (KeyError, TypeError, ValueError):  # a malformed plan draws no card
                continue
            texts += [request.title, request.text]
    return texts


def code_checks(state: Mapping[str, Any], ctx: AtelierContext) -> list[CheckResult]:
    """Run layer 1: answer, prose, constraint, platform and advertising-law checks."""
    content = dict(state.get("generated_content") or {})
    body = str(content.get("body") or "")
    platform = post_platform(state)
    cards = card_texts(state)
    results = answer_checks_as_results(check_answer(body), body)
    results += check_prose(content, card_texts=cards, platform=platform)
    ids = _image_ids(state)
    results += check_platform(content, platform, image_count=len(ids))
    results += check_compliance(content, platform, card_texts=cards)
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
    """Collect what the team's models did, for the deviation check.

    The actions are what an LLM wrote: the supervisor's guidance and focus areas
    (`team_log`), the brief's `BRIEF_WRITTEN_FIELDS` (topic, audience, goal, the
    constraints the model wrote, keywords), the post (title, body, tags) and the
    image plans' descriptions and prompts.

    Anything code copies in is left out — above all the brief's `house_rules`,
    where code puts every injected blocker note
    (`nodes.brief_compiler_agent.house_rules`): counting them would mark every
    blocker addressed whatever the agents did. The brief is read through an
    allow-list of the fields the model writes, not by dropping `house_rules`, so a
    field code adds later cannot leak into the actions either.
    """
    actions: list[dict[str, Any]] = []
    for entry in state.get("team_log") or []:
        if entry.get("guidance"):
            actions.append({"type": "supervisor_guidance", "content": entry["guidance"]})
        if entry.get("focus_areas"):
            actions.append({"type": "focus_areas", "content": list(entry["focus_areas"])})
    brief = state.get("creative_brief") or {}
    written = {k: brief[k] for k in BRIEF_WRITTEN_FIELDS if brief.get(k)}
    if written:
        actions.append({"type": "creative_brief", "content": written})
    content = state.get("generated_content") or {}
    if content:
        post = {k: content.get(k) for k in ("title", "body", "tags")}
        actions.append({"type": "generated_content", "content": post})
    plans = [
        {k: plan.get(k) for k in ("desc", "prompt") if plan.get(k)}
        for plan in state.get("image_plans") or []
    ]
    if any(plans):
        actions.append({"type": "image_prompts", "content": [p for p in plans if p]})
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


def brand_block(brand: Mapping[str, Any] | None) -> list[str]:
    """Return the judge's block on the run's brand (its name and voice), if it has one."""
    shown = {k: (brand or {}).get(k) for k in ("brand_name", "voice") if (brand or {}).get(k)}
    return [data_block("品牌设定", shown)] if shown else []


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
        *brand_block(state.get("brand")),
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
    platform = post_platform(state)
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


def _summary(content: Mapping[str, Any], images: int, score: float | None) -> str:
    body = str(content.get("body") or "")
    excerpt = body.strip().replace("\n", " ")[:SUMMARY_EXCERPT_CHARS]
    tags = " ".join(f"#{t}" for t in content.get("tags") or [])
    scored = f"得分 {score:.2f}" if score is not None else "未评审（无得分）"
    return (
        f"标题：{content.get('title') or '（无）'}；正文 {count_chars(body)} 字，开头：{excerpt}；"
        f"标签：{tags or '（无）'}；图片 {images} 张；{scored}"
    )


@dataclass
class Judgement:
    """Everything the three layers found about one attempt, and what follows from it."""

    threshold: float
    failure: Mapping[str, Any] | None = None  # the executor's failure, if the team broke down
    checks: list[CheckResult] = field(default_factory=list)  # layers 1 and 2
    alert: DeviationAlert | None = None  # layer 2
    judge: JudgeVerdict | None = None  # layer 3
    judge_status: Literal["ok", "unavailable", "skipped"] = "skipped"

    @property
    def failing(self) -> list[CheckResult]:
        """Return the checks that failed."""
        return [c for c in self.checks if not c.passed]

    @property
    def replan_required(self) -> bool:
        """Tell whether an ignored blocker note was found."""
        return self.alert is not None and self.alert.alert_type is AlertType.REPLAN_REQUIRED

    @property
    def score(self) -> float | None:
        """Return the judge's score; None when no judge gave one (never a made-up number)."""
        return round(self.judge.score, 4) if self.judge is not None else None

    @property
    def passed(self) -> bool:
        """Tell whether the attempt passes (see the module docstring): only a judge passes it."""
        return (
            self.failure is None
            and bool(self.checks)
            and not self.failing
            and self.judge is not None
            and self.judge.verdict == "passed"
            and self.judge.score >= self.threshold
        )

    @property
    def not_judged(self) -> bool:
        """Tell whether the judge was unavailable on an attempt whose code checks all pass."""
        return (
            self.failure is None
            and bool(self.checks)
            and not self.failing
            and self.judge_status == "unavailable"
        )

    @property
    def label(self) -> VerdictLabel:
        """Return passed, not_judged, failed (broken, cut off, or so judged), needs_improvement."""
        if self.passed:
            return "passed"
        if self.not_judged:
            return "not_judged"
        if (
            self.failure is not None
            or any(c.name in _ANSWER_CHECKS for c in self.failing)
            or (self.judge is not None and self.judge.verdict == "failed")
        ):
            return "failed"
        return "needs_improvement"

    @property
    def feedback(self) -> str:
        """Return what the next attempt should fix, most important first."""
        parts: list[str] = []
        if self.failure is not None:
            parts.append(str(self.failure.get("message") or ""))
        if self.judge is not None and self.judge.feedback:
            parts.append(self.judge.feedback.strip())
        if self.alert is not None:
            parts.append(self.alert.message)
        parts.extend(f"{c.name}: {c.detail}" for c in self.failing if c.detail)
        return "\n".join(p for p in parts if p)

    @property
    def suggestions(self) -> list[str]:
        """Return the judge's suggestions."""
        return list(self.judge.suggestions) if self.judge is not None else []

    @property
    def dimensions(self) -> dict[str, float]:
        """Return the judge's per-dimension scores (only those it gave)."""
        if self.judge is None or self.judge.dimensions is None:
            return {}
        return self.judge.dimensions.model_dump(exclude_none=True)

    @property
    def reasons(self) -> list[str]:
        """Return one line per reason the attempt did not pass."""
        reasons = [f"{c.name}: {c.detail or 'failed'}" for c in self.failing]
        if self.alert is not None:
            reasons.append(f"knowledge notes: {self.alert.reason}")
        if self.judge is not None:
            if self.judge.verdict != "passed":
                reasons.append(f"judge verdict: {self.judge.verdict}")
            if self.judge.score < self.threshold:
                reasons.append(
                    f"judge score {self.judge.score:.2f} < threshold {self.threshold:.2f}"
                )
        if self.judge_status == "unavailable":
            reasons.append("not judged: the judge failed or timed out; no score")
        return reasons


def draft_source(state: Mapping[str, Any]) -> AttemptSource:
    """Return who made the draft in `state`: the team, a card redraw, or a person's edit.

    The critic resets `draft_source` to None after each attempt, so None means a state
    update since — an edit. A state that never had the key (a thread from before
    revisions were told apart, a test's hand-made state) counts as the team's.
    """
    if "draft_source" not in state:
        return "team"
    source = state.get("draft_source")
    return source if source in ("team", "card") else "edit"


def pass_threshold(state: Mapping[str, Any], ctx: AtelierContext) -> float:
    """Return the judge score a post needs: its brand preset's, else CRITIC_PASS_THRESHOLD."""
    brand = state.get("brand") or {}
    threshold = brand.get("critic_pass_threshold")
    return float(threshold) if threshold is not None else ctx.critic_pass_threshold


async def judge_attempt(state: Mapping[str, Any], ctx: AtelierContext, writer: Any) -> Judgement:
    """Run the three layers on the attempt in `state` (none when the team broke down).

    The team's breakdown (`failure`) belongs to the team's draft: a person's edit or a
    redrawn card made after it is judged on its own.
    """
    failure = state.get("failure") if draft_source(state) == "team" else None
    judgement = Judgement(threshold=pass_threshold(state, ctx), failure=failure)
    if judgement.failure is not None:
        return judgement
    # The checks stat and decode the image files: off the event loop.
    judgement.checks = await asyncio.to_thread(code_checks, state, ctx)
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
        judgement.alert = alert
        judgement.checks.append(_deviation_check(alert))
    if str((state.get("generated_content") or {}).get("body") or "").strip():
        messages = judge_messages(state, judgement.checks, ctx.today().isoformat())
        judgement.judge = await run_judge(ctx, messages)
        judgement.judge_status = "ok" if judgement.judge is not None else "unavailable"
    return judgement


def _retry_context(judgement: Judgement, content: Mapping[str, Any], images: int) -> dict[str, Any]:
    """Return what the next attempt's team sees of this verdict (PRODUCT.md §1.3)."""
    return {
        "review_verdict": judgement.label,
        "review_feedback": "\n".join([judgement.feedback, *judgement.suggestions]).strip(),
        "review_reason": "; ".join(judgement.reasons),
        "verified_items": [
            f"{c.name}: {c.measured}" if c.measured not in (None, []) else c.name
            for c in judgement.checks
            if c.passed
        ],
        "previous_attempt_summary": _summary(content, images, judgement.score),
    }


async def critic(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Judge the attempt, record it, and decide: finalize, retry from rag, or replan."""
    ctx = context_of(runtime)
    writer = runtime.stream_writer
    attempt = int(state.get("attempt") or 0) + 1
    max_attempts = max(int(state.get("max_attempts") or 1), attempt)
    with stage_events(writer, "critic", attempt):
        judgement = await judge_attempt(state, ctx, writer)
        passed, label, score = judgement.passed, judgement.label, judgement.score
        replans = int(state.get("replans") or 0)
        source = draft_source(state)
        replan = (
            source == "team"
            and not passed
            and judgement.replan_required
            and replans < ctx.max_replans
            and attempt < max_attempts
        )
        content = dict(state.get("generated_content") or {})
        images = list(state.get("images") or [])
        checks = [c.model_dump(mode="json") for c in judgement.checks]
        verdict: dict[str, Any] = {
            "verdict": label,
            "passed": passed,
            "replan": replan,
            "score": score,
            "threshold": judgement.threshold,
            "checks": checks,
            "feedback": judgement.feedback,
            "suggestions": judgement.suggestions,
            "dimensions": judgement.dimensions,
            "judge": judgement.judge_status,
            "reasons": judgement.reasons,
            "source": source,
        }
        record = {
            "attempt": attempt,
            **{k: verdict[k] for k in ("verdict", "passed", "score", "feedback", "judge")},
            **{k: verdict[k] for k in ("dimensions", "checks")},
            "failing_checks": len(judgement.failing),
            "post": {k: content.get(k) for k in ("title", "body", "tags")}
            if str(content.get("body") or "").strip()
            else None,
            "body_blocks": list(state.get("body_blocks") or []),
            "images": images,
            "image_plans": list(state.get("image_plans") or []),
            "source": source,
        }
        ignored_blockers = [
            {"id": n.id, "type": n.type.value, "content": n.content}
            for n in (judgement.alert.ignored_notes if judgement.alert else [])
            if n.type is NoteType.BLOCKER
        ]
        update: dict[str, Any] = {
            "attempt": attempt,
            "max_attempts": max_attempts,
            "verdict": verdict,
            "attempts": [*(state.get("attempts") or []), record],
            "retry_context": _retry_context(judgement, content, len(images)),
            "replans": replans + 1 if replan else replans,
            "replan_notes": ignored_blockers if replan else [],
            "draft_source": None,
        }
        if source != "team":
            update["failure"] = None  # the team's breakdown is behind the revision
        after = {**state, **update}
        next_stage = route_from_critic(after)
        exhausted = (
            label not in ("passed", NOT_JUDGED)
            and judgement.failure is None
            and attempts_left(after) == 0
        )
        verdict.update(next=next_stage, exhausted=exhausted)

        emit(
            writer,
            CriticVerdict(
                verdict=label,
                passed=passed,
                score=score,
                threshold=judgement.threshold,
                checks=[CheckReport(**c) for c in checks],
                feedback=judgement.feedback,
                suggestions=judgement.suggestions,
                dimensions=judgement.dimensions,
                judge=judgement.judge_status,
                attempt=attempt,
                max_attempts=max_attempts,
                exhausted=exhausted,
                next=next_stage,
            ),
        )
        emit(writer, AttemptCompleted(attempt=attempt, max_attempts=max_attempts, verdict=label))
        return update
