"""The planner: turn the request into an intent with verifiable constraints (PRODUCT.md §1.1).

One node, three steps:

1. **Clarity, by code** (`assess_clarity`): five dimensions — audience, goal,
   scenario, constraints, length — each 0 or 1, averaged. When the score is
   below `CLARITY_THRESHOLD`, the request has no "just do it" phrase
   (`JUST_DO_IT_PHRASES`), `auto_confirm` is false and no question was asked
   yet, the planner asks in two steps: it writes the question to the
   conversation (an AI message, `question`) and comes back to itself, then
   pauses with `interrupt()` (value: `clarification_request`), so a chat client
   shows the question while the run waits. The question comes *before* the LLM
   call: `interrupt()` re-runs the node from the top on resume, and this way the
   planner's LLM is paid once per plan. A message that follows a post
   (`previous_post`) revises it: no question is asked.
2. **Intent, by LLM** (`PlannerIntent`, forced tool call): action, topic,
   audience, goal, style, platform, constraints, confidence. A transport error
   (after the client's own retries) or two unreadable replies → `failure`, and
   the run goes to finalize with outcome `failed` and a message a user can act
   on. Action `unknown` → finalize with outcome `needs_clarification`.
3. **Constraints, by code** (`merge_constraints`): platform rules, then the
   planner's, then the user's `constraints`, then `image_count` — later ones win —
   validated as `agentkit.checks.Constraints`, which the critic checks by code.

A new request that came as the run's `request` field, not as chat input, is
shown first as the user's message (`agentkit.run_start.shown_request`), so the
conversation reads request, question, post whatever started the run; a resume
or a replan adds none.

On a replan (the critic found an ignored blocker note) the planner runs again
with those notes in its prompt and adds them to the intent's `rules`, which
every agent of the team sees; no question is asked on a replan.

The pipeline enters the planner through `agentkit.run_start.starting_run`: a new
run's counters, history, question and budget (fast mode included) are reset
there, before the planner sees the state.

Resume values accepted after the clarification interrupt (`parse_resume`):
``"defaults"`` or ``{"action": "defaults"}`` → continue with defaults;
``{"action": "details", "details": "..."}`` or any other non-empty string →
the text is added to the request as details. Anything empty → defaults. The
interrupt value is also a HITL request (`action_requests` + `review_configs`,
the shape Agent Chat UI renders), answered with ``{"decisions": [d]}``:
``approve`` → defaults, ``edit`` → the edited args' `details`, ``reject`` →
the run ends with outcome `needs_clarification`.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any, Literal, Self

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from pydantic import BaseModel, Field, ValidationError, model_validator

from agentkit.checks import Constraints, count_chars
from agentkit.common import UnitScore, structured_call
from agentkit.context import AtelierContext, context_of
from agentkit.platforms import PLATFORMS, canonical_platform, hard_limits
from agentkit.post import DEFAULT_PLATFORM, MODEL_CRASHED_MESSAGE, effective_request
from agentkit.run_start import shown_request
from agentkit.state import PipelineState
from core.events import stage_events
from prompts import planner as prompt
from prompts.common import data_block, system_prompt
from providers.llm import model_crash

log = logging.getLogger(__name__)

#: Below this clarity score (0–1) the planner asks before planning.
CLARITY_THRESHOLD = 0.4
#: A request of at least this many characters (`count_chars`) scores the length dimension.
CLARITY_LENGTH_CHARS = 20
#: A request whose subject, boilerplate removed, has at least this many characters
#: scores the scenario dimension.
CLARITY_SUBJECT_CHARS = 4

#: Phrases that mean "don't ask me, just write it" (matched case-insensitively).
JUST_DO_IT_PHRASES: tuple[str, ...] = (
    "直接生成",
    "直接写",
    "直接出",
    "不用问",
    "别问",
    "无需确认",
    "不用确认",
    "按默认",
    "默认就行",
    "你自己发挥",
    "自由发挥",
    "随便写",
    "看着写",
    "看着办",
    "just write it",
    "just write",
    "just do it",
    "don't ask",
    "no questions",
    "use defaults",
)

_AUDIENCE = re.compile(
    r"学生|大学生|学生党|上班族|打工人|职场|白领|宝妈|妈妈|爸爸|家长|新手|小白|入门|"
    r"男生|女生|男士|女士|男性|女性|情侣|老人|中老年|孩子|儿童|宝宝|程序员|敏感肌|油皮|干皮|"
    r"人群|读者|粉丝|受众|面向|适合|"
    r"\b(?:for\s+(?:beginners|students|parents|women|men|kids|teens|developers)|audience|readers)\b",
    re.IGNORECASE,
)
_GOAL = re.compile(
    r"种草|推荐|安利|科普|教程|攻略|测评|评测|分享|避坑|清单|合集|干货|经验|心得|指南|对比|"
    r"讲清楚|讲解|介绍|总结|盘点|推广|引流|宣传|带货|教大家|如何|怎么|为什么|"
    r"\b(?:review|guide|tips|how\s+to|explain|compare|recommend|promote|tutorial|checklist)\b",
    re.IGNORECASE,
)
_CONSTRAINT = re.compile(
    r"\d+\s*(?:字|张|个|条|句|段|tags?|words?|images?|pictures?|characters?)|"
    r"不要|避免|禁止|别用|不能出现|不得|必须|至少|最多|不超过|以内|控制在|字数|标题|标签|配图|"
    r"\b(?:must|avoid|at\s+least|at\s+most|no\s+more\s+than|under)\b",
    re.IGNORECASE,
)
# Words that say "write a post" without saying what about; removed before the
# scenario dimension measures what is left.
_BOILERPLATE = re.compile(
    r"帮我|请你|请|给我|麻烦|写一篇|写一条|写一个|写篇|写个|写|一篇|一条|一个|篇|"
    r"小红书|笔记|帖子|文案|文章|内容|图文|推文|生成|创作|一下|关于|的|吧|呢|"
    r"\b(?:please|write|me|a|an|the|post|note|article|about|xiaohongshu|rednote)\b",
    re.IGNORECASE,
)
_NOT_A_CHARACTER = re.compile(r"[\W_]+")
_JUST_DO_IT = re.compile("|".join(re.escape(p) for p in JUST_DO_IT_PHRASES), re.IGNORECASE)

ClarityDimension = Literal["audience", "goal", "scenario", "constraints", "length"]
CLARITY_DIMENSIONS: tuple[ClarityDimension, ...] = (
    "audience",
    "goal",
    "scenario",
    "constraints",
    "length",
)


# ---------------------------------------------------------------------------
# Clarity (code)
# ---------------------------------------------------------------------------


def has_just_do_it_phrase(text: str) -> bool:
    """Tell whether the text tells us not to ask (直接生成, 不用问, just write it …)."""
    folded = text.casefold()
    return any(phrase in folded for phrase in JUST_DO_IT_PHRASES)


def assess_clarity(state: Mapping[str, Any]) -> dict[str, Any]:
    """Score how clear the request is, by code: five dimensions, each 0 or 1.

    - audience: the `audience` input, or an audience word in the request
      (学生党, 上班族, 新手, 敏感肌, for beginners …);
    - goal: a purpose word (种草, 测评, 攻略, 避坑, 讲清楚, review, how to …);
    - scenario: a concrete subject — at least `CLARITY_SUBJECT_CHARS`
      characters left once "write a post" boilerplate (写一篇, 小红书, 笔记 …),
      "just do it" phrases and punctuation are removed;
    - constraints: the `constraints` or `image_count` input, or a stated limit
      (300字, 3张图, 不要…, 至少 …);
    - length: the request has at least `CLARITY_LENGTH_CHARS` characters.

    Returns:
        ``{"score": mean of the dimensions (0–1), "dimensions": {name: 0|1},
        "missing": [names scoring 0]}``.
    """
    text = effective_request(state)
    subject = _BOILERPLATE.sub("", _JUST_DO_IT.sub("", text))
    subject = _NOT_A_CHARACTER.sub("", subject)
    found: dict[ClarityDimension, bool] = {
        "audience": bool(state.get("audience")) or bool(_AUDIENCE.search(text)),
        "goal": bool(_GOAL.search(text)),
        "scenario": count_chars(subject) >= CLARITY_SUBJECT_CHARS,
        "constraints": bool(state.get("constraints"))
        or state.get("image_count") is not None
        or bool(_CONSTRAINT.search(text)),
        "length": count_chars(text) >= CLARITY_LENGTH_CHARS,
    }
    dimensions = {name: int(found[name]) for name in CLARITY_DIMENSIONS}
    return {
        "score": round(sum(dimensions.values()) / len(dimensions), 2),
        "dimensions": dimensions,
        "missing": [name for name in CLARITY_DIMENSIONS if not found[name]],
    }


def should_ask(state: Mapping[str, Any], clarity: Mapping[str, Any]) -> bool:
    """Tell whether to pause for a clarification question.

    Only when clarity is below `CLARITY_THRESHOLD`, the request has no
    "just do it" phrase, `auto_confirm` is false, no question was asked yet and
    the run neither revises a post (`previous_post`) nor adapts one (`adapt_from`).
    """
    return (
        float(clarity["score"]) < CLARITY_THRESHOLD
        and not has_just_do_it_phrase(str(state.get("request") or ""))
        and not state.get("auto_confirm")
        and state.get("clarification") is None
        and not state.get("previous_post")
        and not state.get("adapt_from")  # adapting a finished post: nothing to ask
    )


#: The HITL action the clarification question offers (its `action_requests[0].name`).
CLARIFY_ACTION = "clarify_request"
#: The decisions a chat client may send for it.
CLARIFY_DECISIONS = ("approve", "edit", "reject")


def clarification_request(clarity: Mapping[str, Any]) -> dict[str, Any]:
    """Build the interrupt value the HTTP service and the console show the user.

    Shape: ``{"type": "clarification", "question": str, "options": [{"id":
    "defaults", "label": ...}, {"id": "details", "label": ...}], "missing":
    [dimension names], "clarity": float}``, plus the same question as a HITL
    request (LangChain's human-in-the-loop shape, which Agent Chat UI renders):
    ``"action_requests": [{"name": "clarify_request", "args": {"details": ""},
    "description": question}], "review_configs": [{"action_name":
    "clarify_request", "allowed_decisions": ["approve", "edit", "reject"]}]``.
    """
    missing = list(clarity["missing"])
    labels = "、".join(prompt.DIMENSION_LABELS[name] for name in missing) or "细节"
    question = prompt.CLARIFY_QUESTION.format(missing=labels)
    return {
        "type": "clarification",
        "question": question,
        "options": [
            {"id": "defaults", "label": prompt.DEFAULTS_LABEL},
            {"id": "details", "label": prompt.DETAILS_LABEL},
        ],
        "missing": missing,
        "clarity": float(clarity["score"]),
        "action_requests": [
            {"name": CLARIFY_ACTION, "args": {"details": ""}, "description": question}
        ],
        "review_configs": [
            {"action_name": CLARIFY_ACTION, "allowed_decisions": list(CLARIFY_DECISIONS)}
        ],
    }


def _decision_answer(decision: Any) -> dict[str, Any]:
    """Read one HITL decision: approve → defaults, edit → its details, reject → ended."""
    kind = decision.get("type") if isinstance(decision, Mapping) else None
    if kind == "reject":
        return {"choice": "rejected", "details": ""}
    if kind == "edit":
        action = decision.get("edited_action") or {}
        args = action.get("args") if isinstance(action, Mapping) else None
        details = args.get("details") if isinstance(args, Mapping) else None
        return parse_resume({"action": "details", "details": details or ""})
    return {"choice": "defaults", "details": ""}


def parse_resume(value: Any) -> dict[str, Any]:
    """Read the user's answer to the clarification question.

    Returns:
        ``{"choice": "defaults", "details": ""}`` for ``"defaults"``,
        ``{"action": "defaults"}`` or an empty answer; ``{"choice": "details",
        "details": text}`` for ``{"action": "details", "details": text}`` or any
        other non-empty string; a HITL answer ``{"decisions": [d]}`` as
        `_decision_answer` reads it (``{"choice": "rejected"}`` for reject).
        Details are capped at 4000 characters.
    """
    details = ""
    if isinstance(value, Mapping) and isinstance(value.get("decisions"), list):
        return _decision_answer(value["decisions"][0] if value["decisions"] else None)
    if isinstance(value, Mapping):
        if value.get("action") != "defaults":
            details = str(value.get("details") or "").strip()
    elif isinstance(value, str) and value.strip().casefold() != "defaults":
        details = value.strip()
    if not details:
        return {"choice": "defaults", "details": ""}
    return {"choice": "details", "details": details[:4000]}


# ---------------------------------------------------------------------------
# Intent (LLM)
# ---------------------------------------------------------------------------


class PlannedConstraints(Constraints):
    """Verifiable constraints; leave a field empty unless the request or platform requires it."""

    # `Constraints`' fields, as the planner's model may answer them: at most 9 images
    # and 20 terms per list, and an inverted range is not an unreadable answer
    # (`merge_constraints` drops it).
    image_min: int | None = Field(default=None, ge=0, le=9, description="Min number of images.")
    image_max: int | None = Field(default=None, ge=0, le=9, description="Max number of images.")
    must_include: list[str] = Field(
        default_factory=list, max_length=20, description="Terms the post must contain."
    )
    must_avoid: list[str] = Field(
        default_factory=list, max_length=20, description="Terms the post must not contain."
    )

    @model_validator(mode="after")
    def _ranges_are_ordered(self) -> Self:
        return self


class PlannerIntent(BaseModel):
    """Return the creative intent of the request."""

    action: Literal["create_post", "revise_post", "unknown"] = Field(
        description="create_post, revise_post, or unknown when the request is not understood."
    )
    topic: str = Field(default="", max_length=200, description="Short topic phrase.")
    audience: str = Field(default="", max_length=200, description="Target readers.")
    goal: str = Field(default="", max_length=300, description="What the post should achieve.")
    style: str = Field(default="", max_length=300, description="Tone and style.")
    platform: str = Field(default="", max_length=40, description="Publishing platform.")
    constraints: PlannedConstraints = Field(default_factory=PlannedConstraints)
    confidence: UnitScore = Field(default=0.5, description="Confidence 0–1.")
    message: str = Field(
        default="", max_length=500, description="For unknown: what the user should clarify."
    )


#: Hard limits of each platform, applied unless the planner or the user says otherwise
#: (from the platform table, `agentkit.platforms`; the critic also checks the table itself).
PLATFORM_CONSTRAINTS: dict[str, dict[str, Any]] = {key: hard_limits(key) for key in PLATFORMS}

_RANGES = ("title", "body", "tag", "image")

FAILED_MESSAGE = (
    "规划这一步没能从语言模型拿到结果（已自动重试）。请确认模型服务可用"
    "（LLM_BASE_URL / LLM_MODEL 或内置模型），稍后再试。"
)
#: The run's message when the user declined to answer the clarification question.
REJECTED_MESSAGE = "已按你的选择结束：需求还不够清楚，补充细节后再发一次即可。"
UNREADABLE_MESSAGE = (
    "规划模型两次都没有返回可读的结构化结果。"
    "请重试，或为 planner 角色配置更强的模型（LLM_MODELS）。"
)
INVALID_CONSTRAINTS_MESSAGE = "输入的 constraints 不合法：{detail}。请修改后重试。"


def merge_constraints(
    planned: Mapping[str, Any] | None,
    user: Mapping[str, Any] | None,
    image_count: int | None,
    platform: str,
) -> dict[str, Any]:
    """Merge constraint sources; later sources win field by field.

    Order: the platform's hard limits (`PLATFORM_CONSTRAINTS`), the planner's,
    the user's `constraints`, and `image_count` (which sets image_min and
    image_max). `must_include` / `must_avoid` are unions. A min/max pair that
    ends up inverted keeps the side the user set and drops the other; when the
    user set neither, both are dropped (an inverted range can never pass).

    Raises:
        pydantic.ValidationError: The user's constraints break a rule of
            `Constraints` (a negative count, an inverted range).
    """
    user_rules = Constraints.model_validate(dict(user or {}))
    user_set = user_rules.model_dump(exclude_unset=True)
    if image_count is not None:
        user_set.update(image_min=image_count, image_max=image_count)
    merged: dict[str, Any] = dict(PLATFORM_CONSTRAINTS.get(platform, {}))
    for source in (dict(planned or {}), user_set):
        for key, value in source.items():
            if key in ("must_include", "must_avoid"):
                terms = [str(t).strip() for t in value or [] if str(t).strip()]
                merged[key] = list(dict.fromkeys([*merged.get(key, []), *terms]))
            elif value is not None and key in Constraints.model_fields:
                merged[key] = value
    for name in _RANGES:
        low, high = merged.get(f"{name}_min"), merged.get(f"{name}_max")
        if low is not None and high is not None and low > high:
            for side in ("min", "max"):
                if f"{name}_{side}" not in user_set:
                    merged.pop(f"{name}_{side}", None)
    return Constraints.model_validate(merged).model_dump(exclude_none=True)


def _planner_context(state: PipelineState, request: str) -> str:
    facts: dict[str, Any] = {
        "platform": state.get("platform") or DEFAULT_PLATFORM,
        "audience": state.get("audience"),
        "image_count": state.get("image_count"),
        "layout_preference": state.get("layout_preference"),
        "user_constraints": state.get("constraints"),
    }
    clarification = state.get("clarification") or {}
    if clarification.get("choice") == "defaults":
        facts["clarification"] = "用户选择按默认继续：缺少的信息请用合理默认补全。"
    blocks = [
        data_block("用户请求", request),
        data_block("已知信息", {k: v for k, v in facts.items() if v not in (None, "", {}, [])}),
    ]
    notes = state.get("replan_notes") or []
    if notes:
        previous = state.get("intent") or {}
        blocks.append(prompt.REPLAN_NOTE)
        blocks.append(data_block("被忽略的规则", [n.get("content") for n in notes]))
        blocks.append(data_block("上一次的规划", previous))
    return "\n\n".join(blocks)


async def _ask_for_intent(ctx: AtelierContext, messages: list[Any]) -> PlannerIntent | None:
    """Call the planner model; one more try when the first reply cannot be parsed."""
    model = ctx.models("planner")
    for _ in range(2):
        intent = await structured_call(model, PlannerIntent, messages)
        if intent is not None:
            return intent
    return None


def _failure(message: str) -> dict[str, Any]:
    return {"failure": {"stage": "planner", "message": message}}


def question_pending(state: Mapping[str, Any]) -> bool:
    """Tell whether the planner wrote its question and is to pause for the answer next.

    Only for the request it was asked about: a new request sent to a thread left
    waiting at a question is assessed afresh.
    """
    question = state.get("question") or {}
    return (
        bool(question.get("value"))
        and question.get("request") == state.get("request")
        and state.get("clarification") is None
    )


async def planner(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Plan the post: ask when the request is vague, then extract the intent and constraints."""
    ctx = context_of(runtime)
    update: dict[str, Any] = {}
    replanning = bool(state.get("replan_notes")) and bool(state.get("intent"))
    with stage_events(runtime.stream_writer, "planner", int(state.get("attempt") or 0)):
        if not replanning and question_pending(state):
            # Pauses the run; on resume the node re-runs from the top and
            # interrupt() returns the answer instead of pausing again.
            answer = parse_resume(interrupt((state.get("question") or {})["value"]))
            update.update(clarification=answer, question=None)
            state = {**state, "clarification": answer}
            if answer["choice"] == "rejected":
                update["intent"] = {"action": "unknown", "message": REJECTED_MESSAGE}
                return update
        elif not replanning:
            # A new request: shown as the user's message when it came as `request`.
            update.update(shown_request(state, runtime))
            clarity = assess_clarity(state)
            update["clarity"] = clarity
            if should_ask(state, clarity):
                # The question goes to the conversation first; the graph comes back
                # here (graphs.pipeline) and pauses on it (above).
                question = clarification_request(clarity)
                asked = AIMessage(content=question["question"], id=f"question-{uuid.uuid4()}")
                pending = {"value": question, "request": state.get("request")}
                messages = [*update.pop("messages", []), asked]
                return {**update, "question": pending, "messages": messages}

        request = effective_request(state)
        messages = [
            SystemMessage(system_prompt(prompt.SYSTEM)),
            HumanMessage(prompt.TASK.format(context=_planner_context(state, request))),
        ]
        try:
            intent = await _ask_for_intent(ctx, messages)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            # The client already retried; the user gets an actionable message, the log the cause.
            log.warning("planner LLM call failed", exc_info=True)
            crash = model_crash(exc)
            message = MODEL_CRASHED_MESSAGE.format(reason=crash) if crash else FAILED_MESSAGE
            return {**update, **_failure(message)}
        if intent is None:
            return {**update, **_failure(UNREADABLE_MESSAGE)}

        # The intent's platform, which every later stage reads (`agentkit.post.post_platform`):
        # the input's wins over the model's guess.
        platform = (
            canonical_platform(state.get("platform"))
            or canonical_platform(intent.platform)  # a model's guess: "小红书", "Twitter", junk
            or DEFAULT_PLATFORM
        )
        try:
            constraints = merge_constraints(
                intent.constraints.model_dump(),
                state.get("constraints"),
                state.get("image_count"),
                platform,
            )
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'constraints'}: {err['msg']}"
                for err in exc.errors()[:3]
            )
            return {**update, **_failure(INVALID_CONSTRAINTS_MESSAGE.format(detail=detail))}

        previous = state.get("intent") or {}
        rules = list(previous.get("rules") or []) if replanning else []
        for note in state.get("replan_notes") or []:
            if note.get("content") and note["content"] not in rules:
                rules.append(note["content"])
        update["intent"] = {
            "action": intent.action,
            "topic": intent.topic.strip(),
            "audience": str(state.get("audience") or intent.audience).strip(),
            "goal": intent.goal.strip(),
            "style": intent.style.strip(),
            "platform": platform,
            "constraints": constraints,
            "confidence": intent.confidence,
            "message": intent.message.strip(),
            "rules": rules,
        }
        update["replan_notes"] = []
        update["failure"] = None
        if intent.action != "revise_post":
            update["previous_post"] = None  # a new request: nothing to revise
        return update
