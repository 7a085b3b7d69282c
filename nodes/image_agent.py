"""The image agent: draws one image per image plan through the `generate_image` tool loop.

One turn is a subgraph of the team (`graphs.team.image_loop`). One round: the agent
asks for `generate_image` calls, the `image_tools` node (a `ToolNode`) runs every
call of the message concurrently — plans are independent — and the agent runs
again, folding the tool results into `images`. The loop ends when every plan has an
image (`images_complete`) or after `max_image_tool_rounds` rounds (fewer than 10).
`image_tool_rounds` is written here and read by `agentkit.routing.should_continue_image`
(`agentkit.state.ImageState`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.runtime import Runtime

from agentkit.common import (
    agent_error,
    build_messages,
    clear_agent_error,
    from_transcript,
    ignores_optional_tools,
    mark_ignores_optional_tools,
    to_transcript,
    tool_spec,
)
from agentkit.context import AtelierContext, context_of
from agentkit.limits import limits_of
from agentkit.state import ImageState
from agentkit.tools import generate_image
from prompts import image as prompt

AGENT = "image_agent"
# What its calls need: the plans, and the style and palette to polish their prompts. Not
# the post's text: the tool lays the card text out from the post itself
# (`agentkit.tools.image_request`), and the cards are drawn while the review reads the text.
SECTIONS = ("request", "brief", "references", "plans", "review")
MAX_PROMPT_CHARS = 2000


def collect_images(state: ImageState) -> list[dict[str, Any]]:
    """Return the images drawn so far for the current plans, by slot (newest per slot wins)."""
    slots = {p.get("slot") for p in state.get("image_plans") or []}
    by_slot = {i["slot"]: i for i in state.get("images") or [] if i.get("slot") in slots}
    for message in from_transcript(state.get("image_messages")):
        artefact = getattr(message, "artifact", None) if isinstance(message, ToolMessage) else None
        if isinstance(artefact, Mapping) and artefact.get("slot") in slots:
            by_slot[artefact["slot"]] = dict(artefact)
    return [by_slot[slot] for slot in sorted(by_slot)]


def _calls_for(
    reply: AIMessage, missing: list[dict[str, Any]], round_no: int
) -> list[dict[str, Any]]:
    """Return one `generate_image` call per missing plan: the model's, else the plan's own.

    The model's calls for plans that still lack an image are kept (first per
    slot; calls for other slots are dropped). Every missing plan the model did
    not ask for — all of them when it made no call, which small local models
    never do unforced — is drawn from the plan's own prompt, so a post always
    gets its images.
    """
    wanted = {p["slot"]: p for p in missing}
    calls: dict[int, dict[str, Any]] = {}
    for call in reply.tool_calls:
        args = call.get("args") or {}
        slot = args.get("slot")
        if call.get("name") != generate_image.name or not isinstance(slot, int):
            continue
        if slot not in wanted or slot in calls:
            continue
        text = str(args.get("prompt") or wanted[slot].get("prompt") or "")
        calls[slot] = {
            "name": generate_image.name,
            "args": {"slot": slot, "prompt": text[:MAX_PROMPT_CHARS]},
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:16]}",
            "type": "tool_call",
        }
    for slot, plan in wanted.items():
        if slot not in calls:
            calls[slot] = {
                "name": generate_image.name,
                "args": {"slot": slot, "prompt": str(plan.get("prompt") or "")[:MAX_PROMPT_CHARS]},
                "id": f"plan_{slot}_{round_no}_{uuid.uuid4().hex[:8]}",
                "type": "tool_call",
            }
    return [calls[slot] for slot in sorted(calls)]


def _finish(images: list[dict[str, Any]], complete: bool) -> dict[str, Any]:
    return {
        "images": images,
        "generated_image_asset_ids": [i["asset_id"] for i in images],
        "images_complete": complete,
        "image_messages": None,
        "image_tool_rounds": 0,
    }


async def image_agent(state: ImageState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Ask for the images still missing, or finish the loop.

    When the model asks for no `generate_image` call, or for fewer than the
    plans still missing, the remaining plans are drawn from their own prompts
    (see `_calls_for`), so every plan gets an image without the model's help.
    A model that asked for no call at all is not asked again in this run
    (`no_optional_tools`): its later rounds draw straight from the plans.
    """
    ctx = context_of(runtime)
    plans = list(state.get("image_plans") or [])
    images = collect_images(state)
    drawn = {i["slot"] for i in images}
    missing = [p for p in plans if p.get("slot") not in drawn]
    if plans and not missing:
        return {**_finish(images, complete=True), **clear_agent_error(state, AGENT)}
    if not plans:
        return {**_finish(images, complete=False), **agent_error(state, AGENT, "no plans")}
    try:
        ctx.image_provider(state.get("image_provider"))
    except ValueError as exc:
        return {**_finish(images, complete=False), **agent_error(state, AGENT, str(exc))}

    rounds = int(state.get("image_tool_rounds") or 0)
    if rounds >= limits_of(state)["max_image_tool_rounds"]:
        slots = ", ".join(str(p["slot"]) for p in missing)
        detail = f"slots {slots} still have no image after {rounds} tool rounds"
        return {**_finish(images, complete=False), **agent_error(state, AGENT, detail)}

    shy: dict[str, Any] = {}
    if ignores_optional_tools(state, AGENT):
        # This model never asks for tools: draw from the plans without asking it again.
        reply = AIMessage(content="")
    else:
        task = prompt.TASK.format(slots="、".join(str(p["slot"]) for p in missing))
        messages = [
            *build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=task),
            *from_transcript(state.get("image_messages")),
        ]
        reply = await ctx.models(AGENT).bind_tools([tool_spec(generate_image)]).ainvoke(messages)
        if not reply.tool_calls:
            shy = mark_ignores_optional_tools(state, AGENT)
    calls = _calls_for(reply, missing, rounds + 1)
    asked = AIMessage(content=reply.content or "", tool_calls=calls, id=reply.id)
    return {
        **shy,
        "images": images,
        "generated_image_asset_ids": [i["asset_id"] for i in images],
        "images_complete": False,
        "image_messages": to_transcript([asked]),
        "image_tool_rounds": rounds + 1,
    }
