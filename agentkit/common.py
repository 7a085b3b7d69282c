"""Helpers the team's agents share: prompt context, structured calls, guidance.

Each agent's prompt carries only the state it needs (`render_context` picks the
sections), never the run's whole message history, so prompt size stays flat as
a run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Protocol, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    SystemMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from agentkit.checks import Constraints
from agentkit.post import DEFAULT_PLATFORM
from prompts import common as prompt_text
from prompts.common import data_block, system_prompt

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Each context section's label in the prompt, in rendering order.
_SECTION_LABELS = {
    "request": "用户请求",
    "intent": "规划意图",
    "constraints": "可验证约束",
    "notes": "知识库笔记",
    "retry": "上一次评审",
    "brief": "创作简报",
    "evidence": "事实证据",
    "references": "风格分析",
    "layout": "版式",
    "plans": "图片计划",
    "content": "当前稿件",
    "images": "已生成图片",
    "review": "审核意见",
}
#: Context sections an agent can ask for, rendered in this order (the labels' order).
SECTIONS: tuple[str, ...] = tuple(_SECTION_LABELS)


def _section_value(name: str, state: Mapping[str, Any]) -> Any:
    match name:
        case "request":
            parts = {
                "request": state.get("request", ""),
                "platform": state.get("platform") or DEFAULT_PLATFORM,
                "audience": state.get("audience"),
                "image_count": state.get("image_count"),
                "layout_preference": state.get("layout_preference"),
            }
            return {k: v for k, v in parts.items() if v not in (None, "")}
        case "intent":
            return state.get("intent")
        case "constraints":
            return state.get("constraints")
        case "notes":
            return [
                {"id": n.get("id"), "type": n.get("type"), "content": n.get("content")}
                for n in state.get("knowledge_notes") or []
            ]
        case "retry":
            return state.get("retry_context")
        case "brief":
            return state.get("creative_brief")
        case "evidence":
            pack = state.get("evidence_pack")
            if not pack:
                return None
            return {**pack, "body_blocks": state.get("body_blocks") or []}
        case "references":
            return state.get("reference_analyses")
        case "layout":
            return state.get("layout_spec")
        case "plans":
            return state.get("image_plans")
        case "content":
            return state.get("generated_content")
        case "images":
            return [{"slot": i.get("slot"), "alt": i.get("alt")} for i in state.get("images") or []]
        case "review":
            review = state.get("review_feedback")
            if not review:
                return None
            return {**review, "dimensions": state.get("quality_scores") or {}}
    raise ValueError(f"unknown context section {name!r}")


def render_context(state: Mapping[str, Any], sections: Iterable[str]) -> str:
    """Render the chosen state sections as delimited data blocks (empty ones skipped)."""
    wanted = set(sections)
    blocks = []
    for name in SECTIONS:
        if name in wanted:
            value = _section_value(name, state)
            if value:
                blocks.append(data_block(_SECTION_LABELS[name], value))
    return "\n\n".join(blocks)


def guidance_for(agent: str, state: Mapping[str, Any]) -> str:
    """Return the supervisor's guidance and focus areas for `agent` as prompt text.

    When routing sent the run here instead of where the supervisor asked, the
    supervisor's guidance was meant for another agent; the correction's detail is
    given instead.
    """
    log_entries = state.get("team_log") or []
    entry = log_entries[-1] if log_entries else None
    if entry is None or entry.get("routed") != agent:
        return ""
    if entry.get("reason"):
        return f"调度说明：{entry.get('reason')} — {entry.get('detail', '')}".strip()
    lines = []
    if entry.get("guidance"):
        lines.append(data_block("主管指示", entry["guidance"]))
    previous = (state.get("supervisor_decision") or {}).get("context_from_previous")
    if previous:
        lines.append(data_block("上一步结论", previous))
    if entry.get("focus_areas"):
        lines.append(data_block("重点关注", entry["focus_areas"]))
    return "\n".join(lines)


def build_messages(
    role_text: str, state: Mapping[str, Any], sections: Iterable[str], agent: str, task: str = ""
) -> list[BaseMessage]:
    """Build an agent's prompt: system rules, context blocks, constraints, guidance and task.

    When the "constraints" section is asked for, the verifiable constraints are
    also spelled out as rules (`describe_constraints`), not only shown as data.
    """
    sections = tuple(sections)
    rules = describe_constraints(state.get("constraints")) if "constraints" in sections else ""
    parts = (render_context(state, sections), rules, guidance_for(agent, state), task)
    human = "\n\n".join(part for part in parts if part)
    return [SystemMessage(system_prompt(role_text)), HumanMessage(human or "开始。")]


#: Each tool's OpenAI form by the id of the schema class or tool (pinned with it).
_TOOL_SPECS: dict[int, tuple[object, dict[str, Any]]] = {}


def tool_spec(tool: type[BaseModel] | BaseTool) -> dict[str, Any]:
    """Return a schema class or tool in the OpenAI tool form, converted once per process.

    `bind_tools` and `with_structured_output` convert a pydantic class (its whole JSON
    schema) on every call: about 7 % of a worker's CPU with 150 runs at once
    (`bench/bench_scale.py` under py-spy). They take the converted form as it is, and
    the request they send is the same. Only module-level classes and tools come
    here, so the table stays as small as the agents' schemas.
    """
    found = _TOOL_SPECS.get(id(tool))
    if found is None:
        found = _TOOL_SPECS[id(tool)] = (tool, convert_to_openai_tool(tool))
    return found[1]


async def structured_call(
    model: BaseChatModel, schema: type[M], messages: Sequence[BaseMessage]
) -> M | None:
    """Ask for one `schema` object by forced tool calling; None when it cannot be parsed.

    LLM transport errors propagate (the client already retried); a reply that is
    not a valid `schema` is logged and returned as None so the caller decides.
    """
    runnable = model.with_structured_output(
        tool_spec(schema), method="function_calling", include_raw=True
    )
    result: Any = await runnable.ainvoke(list(messages))
    parsed = result.get("parsed") if isinstance(result, dict) else result
    problem: Any = result.get("parsing_error") if isinstance(result, dict) else None
    if isinstance(parsed, dict):
        try:
            return schema.model_validate(parsed)
        except ValidationError as exc:
            problem = exc.errors()[:3]
    log.warning("unparsable %s reply: %s", schema.__name__, problem)
    return None


def parse_tool_call(calls: Sequence[Mapping[str, Any]], schema: type[M]) -> M | None:
    """Return the first tool call named like `schema`, validated, or None."""
    for call in calls:
        if call.get("name") == schema.__name__:
            try:
                return schema.model_validate(call.get("args") or {})
            except ValidationError as exc:
                log.warning("invalid %s arguments: %s", schema.__name__, exc.errors()[:3])
    return None


# --- tool loops ---------------------------------------------------------------------


def to_transcript(messages: Iterable[BaseMessage]) -> list[dict[str, Any]]:
    """Return messages as a tool-loop transcript stores them (see `agentkit.state.transcript`)."""
    return messages_to_dict(list(messages))


def from_transcript(entries: Iterable[Any] | None) -> list[BaseMessage]:
    """Return a transcript's messages (message objects pass through unchanged)."""
    items = list(entries or [])
    return [m if isinstance(m, BaseMessage) else messages_from_dict([m])[0] for m in items]


class ToolLoopNode(Protocol):
    """A graph node taking the state and the run's config (what `tool_loop_node` returns).

    Any graph's state: the team's (the supervisor's look-ups) or a tool loop's subgraph's.
    """

    def __call__(self, state: Any, config: RunnableConfig) -> Awaitable[dict[str, Any]]:
        """Run the tool calls of the loop's last message."""
        ...


def tool_loop_node(tools: Sequence[BaseTool], transcript_key: str) -> ToolLoopNode:
    """Return a graph node that runs the tool calls of a loop's last message.

    A `ToolNode` does the work — injecting `ToolRuntime` (context, state, stream
    writer) and running the calls of one message concurrently — on the
    transcript turned back into messages; its results are stored as transcript
    entries, so they stay off the `messages` stream.
    """
    runner = ToolNode(tools, messages_key=transcript_key)

    async def run_tools(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        messages = from_transcript(state.get(transcript_key))
        result = await runner.ainvoke({**state, transcript_key: messages}, config)
        return {transcript_key: to_transcript(result[transcript_key])}

    return run_tools


def ignores_optional_tools(state: Mapping[str, Any], role: str) -> bool:
    """Return whether `role`'s model already answered an optional tool offer in prose."""
    return role in (state.get("no_optional_tools") or [])


def mark_ignores_optional_tools(state: Mapping[str, Any], role: str) -> dict[str, Any]:
    """Return the update recording that `role`'s model answers optional tool offers in prose."""
    roles = list(state.get("no_optional_tools") or [])
    if role in roles:
        return {}
    log.info("%s answered an optional tool offer in prose; later turns skip the offer", role)
    return {"no_optional_tools": [*roles, role]}


# --- errors and constraints ------------------------------------------------


#: How many unparsable-output notes the state keeps (newest last).
MAX_AGENT_ERRORS = 8


def agent_error(state: Mapping[str, Any], agent: str, detail: str) -> dict[str, Any]:
    """Return the update recording that `agent` produced nothing usable, and why.

    The run goes on: the supervisor sees the note in its prompt and routing's
    no-progress cap keeps it from asking the same agent forever.
    """
    log.warning("%s produced no usable output: %s", agent, detail)
    errors = [*(state.get("agent_errors") or []), f"{agent}: {detail}"]
    return {"agent_errors": errors[-MAX_AGENT_ERRORS:]}


def clear_agent_error(state: Mapping[str, Any], agent: str) -> dict[str, Any]:
    """Return the update dropping `agent`'s error notes once it succeeded (empty if none)."""
    errors = state.get("agent_errors") or []
    kept = [e for e in errors if not e.startswith(f"{agent}: ")]
    return {"agent_errors": kept} if len(kept) != len(errors) else {}


def parse_constraints(raw: Mapping[str, Any] | None) -> Constraints:
    """Return the planner's constraints as a model; an invalid dict counts as none."""
    try:
        return Constraints.model_validate(raw or {})
    except ValidationError:
        log.warning("ignoring invalid constraints: %s", raw)
        return Constraints()


def _range_text(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return str(low) if low == high else f"{low}–{high}"
    return f"至少 {low}" if low is not None else f"最多 {high}"


def describe_constraints(raw: Mapping[str, Any] | None) -> str:
    """Spell the verifiable constraints out as prompt rules ("" when there are none)."""
    rules = parse_constraints(raw)
    lines = []
    for name, template in prompt_text.CONSTRAINT_RANGE.items():
        low, high = getattr(rules, f"{name}_min"), getattr(rules, f"{name}_max")
        if low is not None or high is not None:
            lines.append(template.format(range=_range_text(low, high)))
    if rules.must_include:
        lines.append(prompt_text.CONSTRAINT_INCLUDE.format(terms="、".join(rules.must_include)))
    if rules.must_avoid:
        lines.append(prompt_text.CONSTRAINT_AVOID.format(terms="、".join(rules.must_avoid)))
    if not lines:
        return ""
    return "\n".join([prompt_text.CONSTRAINT_HEADER, *(f"- {line}" for line in lines)])


#: Images a post gets when neither the request nor the constraints say how many.
DEFAULT_IMAGE_COUNT = 3
MAX_IMAGE_COUNT = 9


def wanted_images(state: Mapping[str, Any], *, use_layout: bool = True) -> int:
    """Return how many images the post needs.

    The request's `image_count` wins, then the layout's `total_images`, then
    `DEFAULT_IMAGE_COUNT`; the result is kept inside the constraints' image
    range and 1–9.
    """
    layout = state.get("layout_spec") or {}
    count = state.get("image_count") or (use_layout and layout.get("total_images"))
    try:
        wanted = int(count) if count else DEFAULT_IMAGE_COUNT
    except (TypeError, ValueError):
        wanted = DEFAULT_IMAGE_COUNT
    rules = parse_constraints(state.get("constraints"))
    if rules.image_min is not None:
        wanted = max(wanted, rules.image_min)
    if rules.image_max is not None:
        wanted = min(wanted, rules.image_max)
    return min(max(wanted, 1), MAX_IMAGE_COUNT)


# --- lenient structured outputs ---------------------------------------------------


def clipped(limit: int) -> BeforeValidator:
    """Return a validator cutting a string or list to `limit` before its bound is checked.

    Used with `Field(max_length=limit)`: the JSON schema still tells the model the
    bound (grammar-constrained servers honour it), and an over-long answer from a
    model that ignores it is shortened instead of throwing the whole output away.
    """

    def clip(value: Any) -> Any:
        if isinstance(value, str | list):
            return value[:limit]
        return value

    return BeforeValidator(clip)


def _unit_score(value: Any) -> Any:
    """Read a 0–1 score leniently: 0–10 and 0–100 scales are rescaled, the rest clamped."""
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%"))
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        score = float(value)
        if 1 < score <= 10:
            score /= 10
        elif 10 < score <= 100:
            score /= 100
        return min(max(score, 0.0), 1.0)
    return value


#: Validator for 0–1 scores: `Annotated[float, UNIT_SCORE, Field(ge=0, le=1)]`.
UNIT_SCORE = BeforeValidator(_unit_score)

#: The one type of every 0–1 score an LLM gives (the judge's, the review's, the planner's
#: confidence): lenient the same way everywhere — ``7`` on a 1–10 habit reads as 0.7,
#: ``85`` or ``"85%"`` as 0.85 — while the JSON schema still tells the model 0–1.
UnitScore = Annotated[float, UNIT_SCORE, Field(ge=0, le=1)]


class QualityDimensions(BaseModel):
    """Scores 0–1 per dimension; a dimension left out was not judged.

    The one model of the five quality dimensions (`agentkit.state.QUALITY_DIMENSIONS`,
    in that order) that the review agent and the critic's judge both answer with.
    """

    infoDensity: UnitScore | None = Field(default=None, description="Information density.")
    textImageAlignment: UnitScore | None = Field(default=None, description="Text-image match.")
    styleConsistency: UnitScore | None = Field(default=None, description="Style consistency.")
    readability: UnitScore | None = Field(default=None, description="Readability.")
    platformFit: UnitScore | None = Field(default=None, description="Platform fit.")
