"""The campaign planner: one round of asking for the calendar's missing topics (docs/platforms.md).

Each run of the node makes one LLM call (`CampaignTopics`, forced tool call) for
the topics still missing, then screens the answer by code, item by item:

- an item that is not a topic (no text, wrong types, an empty topic) is rejected
  as junk; its `first_platform` is read leniently (`agentkit.platforms.
  canonical_platform`) and, when it is not one of the campaign's platforms, the
  campaign's first platform is used;
- an item that nearly duplicates a topic to avoid, one already accepted or an
  earlier item of the same answer (`agentkit.campaign_plan.near_duplicate_of`) is
  rejected, with the topic it repeats and the score;
- items beyond the number missing are dropped.

The graph (`graphs.campaign_planner`) loops back here while topics are missing and
rounds are left (`MAX_PLAN_ROUNDS`), so the model is asked again for just the
missing ones, shown what was not taken and why; `finish_plan` then writes the
result — `completed` with every topic, or `failed` with an honest message and the
topics it did get. A transport error (after the client's retries) fails the plan
at once. The brief, the brand and the topics to avoid reach the model only as
delimited data.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from agentkit.campaign_plan import (
    MAX_PLAN_ROUNDS,
    CampaignPlanState,
    PlannedItem,
    RejectedItem,
    near_duplicate_of,
)
from agentkit.common import tool_spec
from agentkit.context import AtelierContext, context_of
from agentkit.platforms import PLATFORMS, canonical_platform
from agentkit.post import MODEL_CRASHED_MESSAGE
from core.events import stage_events
from prompts import campaign_planner as prompt
from prompts.common import data_block, system_prompt
from providers.llm import model_crash

log = logging.getLogger(__name__)

ROLE = "campaign_planner"

FAILED_MESSAGE = "活动规划这一步没能从语言模型拿到结果（已自动重试）。请确认模型服务可用后再试。"
SHORT_MESSAGE = (
    "规划了 {rounds} 轮，只得到 {got} / {wanted} 个互不重复的选题：模型反复给出重复或"
    "不合格的选题。可以把简报写得更具体、减少篇数，或为 campaign_planner 角色配置更强的"
    "模型（LLM_MODELS）后再试。"
)


def _text_or_empty(value: Any) -> Any:
    return value if isinstance(value, str) else ""


class PlannedTopic(BaseModel):
    """One topic of the calendar."""

    topic: str = Field(min_length=1, max_length=60, description="The topic, a short phrase.")
    angle: str = Field(default="", max_length=200, description="The angle: how and for whom.")
    key_points: list[str] = Field(
        default_factory=list, max_length=6, description="Two to four key points."
    )
    # Read leniently: a missing or junk platform falls back to the campaign's first.
    first_platform: Annotated[str, BeforeValidator(_text_or_empty)] = Field(
        default="", max_length=40, description="The platform id to post it on first."
    )


class CampaignTopics(BaseModel):
    """Return the campaign's topics."""

    items: list[PlannedTopic] = Field(description="The topics, as many as asked for.")


def _context(state: Mapping[str, Any], missing: int) -> str:
    platforms = [
        {"id": p, "name": PLATFORMS[p].name, "form": PLATFORMS[p].form}
        for p in state.get("platforms") or []
        if p in PLATFORMS
    ]
    brand = state.get("brand") or {}
    shown = {k: brand.get(k) for k in ("brand_name", "voice", "audience") if brand.get(k)}
    blocks = [data_block("活动简报", str(state.get("brief") or "")), data_block("平台", platforms)]
    if shown:
        blocks.append(data_block("品牌设定", shown))
    taken = [
        *(state.get("avoid") or []),
        *(f"{i['topic']}｜{i['angle']}" for i in state.get("accepted") or []),
    ]
    if taken:
        blocks.append(data_block("已有选题", taken))
    last_round = int(state.get("rounds") or 0)
    turned_down = [
        {"topic": r["topic"], "reason": r["reason"]}
        for r in state.get("rejected") or []
        if r["round"] == last_round
    ]
    if turned_down:
        blocks.append(prompt.RETRY.format(count=missing))
        blocks.append(data_block("未采用的回答", turned_down))
    return "\n\n".join(blocks)


def plan_messages(state: Mapping[str, Any], missing: int) -> list[BaseMessage]:
    """Build the prompt: the role, then the brief, platforms, brand and topics to avoid as data."""
    return [
        SystemMessage(system_prompt(prompt.SYSTEM)),
        HumanMessage(prompt.TASK.format(count=missing, context=_context(state, missing))),
    ]


async def ask_topics(model: BaseChatModel, messages: Sequence[BaseMessage]) -> list[Any] | None:
    """Ask for `CampaignTopics`; return its raw items, or None when the reply has none.

    The items are returned unvalidated: one malformed item must not cost the good
    ones (`screen` validates them one by one). Transport errors propagate.
    """
    runnable = model.with_structured_output(
        tool_spec(CampaignTopics), method="function_calling", include_raw=True
    )
    result: Any = await runnable.ainvoke(list(messages))
    parsed = result.get("parsed") if isinstance(result, dict) else result
    items = parsed.get("items") if isinstance(parsed, dict) else None
    if not isinstance(items, list):
        log.warning("unreadable CampaignTopics reply: %s", type(items).__name__)
        return None
    return items


def _junk_reason(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "item"
    return f"not a topic ({where}: {first['msg']})"


def screen(
    raw: Sequence[Any], state: Mapping[str, Any], round_number: int
) -> tuple[list[PlannedItem], list[RejectedItem]]:
    """Take the distinct, well-formed topics of one answer (module docstring)."""
    platforms = list(state.get("platforms") or [])
    accepted = list(state.get("accepted") or [])
    missing = int(state.get("posts") or 0) - len(accepted)
    seen = [*(state.get("avoid") or []), *(f"{i['topic']} {i['angle']}" for i in accepted)]
    taken: list[PlannedItem] = []
    rejected: list[RejectedItem] = []
    for value in raw:
        topic_text = str(value.get("topic") or "") if isinstance(value, Mapping) else ""
        try:
            item = PlannedTopic.model_validate(value)
        except ValidationError as error:
            rejected.append(
                RejectedItem(round=round_number, topic=topic_text[:60], reason=_junk_reason(error))
            )
            continue
        topic, angle = item.topic.strip(), item.angle.strip()
        if not topic:
            rejected.append(RejectedItem(round=round_number, topic="", reason="an empty topic"))
            continue
        if len(taken) >= missing:
            rejected.append(
                RejectedItem(round=round_number, topic=topic, reason="more topics than asked for")
            )
            continue
        duplicate = near_duplicate_of(f"{topic} {angle}", seen)
        if duplicate is not None:
            other, score = duplicate
            reason = f"a near-duplicate of 「{other}」 (similarity {score:.2f})"
            rejected.append(RejectedItem(round=round_number, topic=topic, reason=reason))
            continue
        first = canonical_platform(item.first_platform)
        taken.append(
            PlannedItem(
                index=len(accepted) + len(taken) + 1,
                topic=topic,
                angle=angle,
                key_points=[p.strip() for p in item.key_points if p.strip()][:4],
                first_platform=first if first is not None and first in platforms else platforms[0],
            )
        )
        seen.append(f"{topic} {angle}")
    return taken, rejected


async def campaign_planner(
    state: CampaignPlanState, runtime: Runtime[AtelierContext]
) -> dict[str, Any]:
    """Ask once for the missing topics and keep the distinct ones (module docstring)."""
    ctx = context_of(runtime)
    round_number = int(state.get("rounds") or 0) + 1
    accepted = list(state.get("accepted") or [])
    missing = int(state["posts"]) - len(accepted)
    with stage_events(runtime.stream_writer, ROLE, round_number):
        try:
            raw = await ask_topics(ctx.models(ROLE), plan_messages(state, missing))
        except GraphBubbleUp:
            raise
        except Exception as exc:
            log.warning("campaign planner LLM call failed", exc_info=True)
            crash = model_crash(exc)
            message = MODEL_CRASHED_MESSAGE.format(reason=crash) if crash else FAILED_MESSAGE
            return {"rounds": round_number, "failure": {"stage": ROLE, "message": message}}
        if raw is None:
            taken: list[PlannedItem] = []
            rejected = [
                RejectedItem(round=round_number, topic="", reason="no CampaignTopics items")
            ]
        else:
            taken, rejected = screen(raw, state, round_number)
            if not raw:
                rejected.append(RejectedItem(round=round_number, topic="", reason="no topics"))
        return {
            "rounds": round_number,
            "accepted": [*accepted, *taken],
            "rejected": [*(state.get("rejected") or []), *rejected],
        }


async def finish_plan(state: CampaignPlanState) -> dict[str, Any]:
    """Write the result: every topic (`completed`), or what there is and why (`failed`)."""
    items = list(state.get("accepted") or [])
    wanted = int(state["posts"])
    rounds = int(state.get("rounds") or 0)
    failure = state.get("failure")
    complete = failure is None and len(items) >= wanted
    if failure is not None:
        message = str(failure.get("message") or FAILED_MESSAGE)
    elif complete:
        message = f"已规划 {wanted} 个互不重复的选题（{rounds} 轮）。"
    else:
        message = SHORT_MESSAGE.format(rounds=rounds, got=len(items), wanted=wanted)
    return {
        "result": {
            "outcome": "completed" if complete else "failed",
            "items": items[:wanted],
            "message": message,
            "rounds": rounds,
            "max_rounds": MAX_PLAN_ROUNDS,
            "rejected": list(state.get("rejected") or []),
        }
    }
