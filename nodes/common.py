"""Helpers the team's agents share: prompt context, structured calls, guidance.

Each agent's prompt carries only the state it needs (`render_context` picks the
sections), never the run's whole message history, so prompt size stays flat as
a run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError

from prompts.common import data_block, system_prompt

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Context sections an agent can ask for, rendered in this order.
SECTIONS: tuple[str, ...] = (
    "request",
    "intent",
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
    "review",
)

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


def _section_value(name: str, state: Mapping[str, Any]) -> Any:
    match name:
        case "request":
            parts = {
                "request": state.get("request", ""),
                "platform": state.get("platform") or "xiaohongshu",
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
            return [
                {"slot": i.get("slot"), "alt": i.get("alt")} for i in state.get("images") or []
            ]
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
    if entry.get("focus_areas"):
        lines.append(data_block("重点关注", entry["focus_areas"]))
    return "\n".join(lines)


def build_messages(
    role_text: str, state: Mapping[str, Any], sections: Iterable[str], agent: str, task: str = ""
) -> list[BaseMessage]:
    """Build an agent's prompt: system rules, then its context blocks, guidance and task."""
    human = "\n\n".join(
        part for part in (render_context(state, sections), guidance_for(agent, state), task) if part
    )
    return [SystemMessage(system_prompt(role_text)), HumanMessage(human or "开始。")]


async def structured_call(
    model: BaseChatModel, schema: type[M], messages: Sequence[BaseMessage]
) -> M | None:
    """Ask for one `schema` object by forced tool calling; None when it cannot be parsed.

    LLM transport errors propagate (the client already retried); a reply that is
    not a valid `schema` is logged and returned as None so the caller decides.
    """
    runnable = model.with_structured_output(schema, method="function_calling", include_raw=True)
    result: Any = await runnable.ainvoke(list(messages))
    parsed = result.get("parsed") if isinstance(result, dict) else result
    if isinstance(parsed, schema):
        return parsed
    if isinstance(parsed, dict):
        try:
            return schema.model_validate(parsed)
        except ValidationError:
            pass
    log.warning("unparsable %s reply: %s", schema.__name__, result.get("parsing_error"))
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
