"""The layout planner: orders the post's cover, text sections and images."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langgraph.runtime import Runtime
from pydantic import BaseModel, BeforeValidator, Field

from agentkit.common import (
    agent_error,
    build_messages,
    clear_agent_error,
    clipped,
    structured_call,
    wanted_images,
)
from agentkit.context import AtelierContext, context_of
from agentkit.state import TeamState
from prompts import layout as prompt

AGENT = "layout_planner_agent"
SECTIONS = ("request", "constraints", "retry", "brief", "evidence", "references", "review")


BlockType = Literal["cover", "text", "image"]


def _block_type(value: Any) -> Any:
    """Read an unknown block type as a text block rather than rejecting the whole layout."""
    text = str(value).strip().lower()
    return text if text in ("cover", "text", "image") else "text"


class LayoutBlock(BaseModel):
    """One block of the post, in reading order."""

    type: Annotated[BlockType, BeforeValidator(_block_type)] = Field(
        default="text", description="cover, text or image."
    )
    desc: Annotated[str, clipped(200)] = Field(default="", max_length=200, description="Content.")


class LayoutSpec(BaseModel):
    """Return the post's layout."""

    blocks: Annotated[list[LayoutBlock], clipped(20)] = Field(
        default_factory=list, max_length=20, description="Blocks in order; the first is cover."
    )
    total_images: int = Field(default=1, ge=0, le=20, description="Images, cover included.")


async def layout_planner_agent(
    state: TeamState, runtime: Runtime[AtelierContext]
) -> dict[str, Any]:
    """Write `layout_spec` {blocks[{type, desc}], total_images}.

    Two facts are fixed by code, not left to the model: `total_images` is the
    number of images the request asks for (`agentkit.common.wanted_images`), and
    the layout opens with a cover block.
    """
    ctx = context_of(runtime)
    images = wanted_images(state, use_layout=False)
    task = prompt.TASK.format(
        images=images, preference=state.get("layout_preference") or "balanced"
    )
    messages = build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=task)
    spec = await structured_call(ctx.models(AGENT), LayoutSpec, messages)
    if spec is None:
        return agent_error(state, AGENT, "no LayoutSpec")
    blocks = [b.model_dump() for b in spec.blocks]
    if not blocks or blocks[0]["type"] != "cover":
        blocks.insert(0, {"type": "cover", "desc": "封面"})
    layout = {"blocks": blocks, "total_images": images}
    return {"layout_spec": layout, **clear_agent_error(state, AGENT)}
