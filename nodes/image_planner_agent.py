"""The image planner: one plan (slot, type, description, prompt) per image of the post."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langgraph.runtime import Runtime
from pydantic import BaseModel, BeforeValidator, Field

from agentkit.common import (
    MAX_IMAGE_COUNT,
    agent_error,
    build_messages,
    clear_agent_error,
    clipped,
    structured_call,
    wanted_images,
)
from agentkit.context import AtelierContext, context_of
from agentkit.state import TeamState
from prompts import image_planner as prompt

AGENT = "image_planner_agent"
SECTIONS = (
    "request",
    "constraints",
    "retry",
    "brief",
    "evidence",
    "references",
    "layout",
    "review",
)

PlanType = Literal["cover", "content", "detail"]


def _plan_type(value: Any) -> Any:
    text = str(value).strip().lower()
    return text if text in ("cover", "content", "detail") else "content"


class ImagePlan(BaseModel):
    """The plan of one image."""

    slot: int = Field(default=1, ge=1, le=99, description="1-based position in the post.")
    type: Annotated[PlanType, BeforeValidator(_plan_type)] = Field(
        default="content", description="cover, content or detail."
    )
    desc: Annotated[str, clipped(200)] = Field(
        default="", max_length=200, description="What the image shows, one sentence."
    )
    prompt: Annotated[str, clipped(1000)] = Field(
        default="", max_length=1000, description="Visual description for the image model."
    )


class ImagePlans(BaseModel):
    """Return one plan per image."""

    plans: Annotated[list[ImagePlan], clipped(MAX_IMAGE_COUNT)] = Field(
        min_length=1, max_length=MAX_IMAGE_COUNT, description="Plans, slot 1 first."
    )


def _filler_descriptions(state: TeamState) -> list[str]:
    """Describe plans the model left out: the layout's image blocks, then the sections."""
    layout = state.get("layout_spec") or {}
    found = [b.get("desc", "") for b in layout.get("blocks") or [] if b.get("type") == "image"]
    found += [b.get("heading") or b.get("text", "") for b in state.get("body_blocks") or []]
    return [d for d in found if d]


def complete_plans(state: TeamState, plans: list[ImagePlan], count: int) -> list[dict[str, Any]]:
    """Return exactly `count` plans, slots 1..count in order, the first a cover.

    The model's plans are kept in the order given and renumbered; missing ones
    are filled from the layout's image blocks and the body's sections (their
    description doubles as the prompt), so the post always gets the number of
    images it asks for.
    """
    topic = (state.get("creative_brief") or {}).get("topic") or state.get("request", "")[:60]
    fillers = iter(_filler_descriptions(state))
    result = []
    for index in range(count):
        slot = index + 1
        if index < len(plans):
            plan = plans[index].model_dump()
        else:
            desc = next(fillers, f"{topic}（第{slot}张）")
            plan = {"type": "content", "desc": desc, "prompt": desc}
        plan["slot"] = slot
        plan["desc"] = plan["desc"] or plan["prompt"] or str(topic)
        plan["prompt"] = plan["prompt"] or plan["desc"]
        if slot == 1:
            plan["type"] = "cover"
        elif plan["type"] == "cover":
            plan["type"] = "content"
        result.append(plan)
    return result


async def image_planner_agent(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Write `image_plans`; new plans make earlier images obsolete, so those are dropped."""
    ctx = context_of(runtime)
    count = wanted_images(state)
    task = prompt.TASK.format(images=count)
    messages = build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=task)
    answer = await structured_call(ctx.models(AGENT), ImagePlans, messages)
    if answer is None:
        return agent_error(state, AGENT, "no ImagePlans with any plan")
    ordered = sorted(answer.plans, key=lambda p: p.slot)
    return {
        "image_plans": complete_plans(state, ordered, count),
        "images": [],
        "generated_image_asset_ids": [],
        "images_complete": False,
        **clear_agent_error(state, AGENT),
    }
