"""Redraw one card of a finished post, then let the critic check the post again.

A client asks for it the LangGraph way, with a run whose command jumps here and
names the card in the state update —

```
POST /threads/{thread_id}/runs/stream
{"assistant_id": "atelier",
 "command": {"goto": "redraw_card", "update": {"redraw": {"slot": 2, "prompt": ""}}}}
```

(`client.runs.stream(thread_id, "atelier", command={...})` with the SDK) — or in
two steps, like an edit: a state update as finalize, `POST /threads/{thread_id}/state`
with `{"values": {"redraw": {"slot": 2}}, "as_node": "finalize"}`, then a run with
no input (`finalize → redraw_card` while `redraw` is set). The
node draws that slot's card again from the same plan and the post's current text,
as the next `variant` (the local cards arrange their background anew; a
generative provider draws a new picture, with `prompt` as the new visual
description when given), replaces that one image in `images` and leaves every
other image — its asset, its bytes, its URL — as it was. Then `redraw_card →
critic`: the critic judges the post with its new card as an attempt of source
`card`, and, like a person's edit, sends it to finalize whatever the verdict
(`agentkit.pipeline_routing.route_from_critic`): another team attempt would redraw
every card. Finalize publishes it (`nodes.finalize`).

The card to redraw must be one of the post's images (`agentkit.post.card_to_redraw`):
the state holds the published post's artefacts after finalize, also when an
earlier attempt was published. A request naming no such card fails the run with a message saying so
(the HTTP API refuses it before a run starts: `app.schemas.check_pipeline_command`).
A provider that cannot draw fails the run the same way; the post stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from agentkit.context import AtelierContext, context_of
from agentkit.post import card_to_redraw
from agentkit.state import PipelineState
from agentkit.tools import draw_card
from core.events import stage_events

NODE = "redraw_card"


def _plan_for(state: Mapping[str, Any], image: Mapping[str, Any]) -> dict[str, Any]:
    """Return the image plan the card was drawn from (rebuilt from the image if none is kept)."""
    slot = image["slot"]
    for plan in state.get("image_plans") or []:
        if plan.get("slot") == slot:
            return dict(plan)
    kind = "cover" if slot == 1 else "content"
    return {"slot": slot, "type": kind, "desc": image.get("alt") or "", "prompt": ""}


async def redraw_card(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Draw the requested card again and put it in place of the old one."""
    ctx = context_of(runtime)
    images = [dict(i) for i in state.get("images") or []]
    request = card_to_redraw(state.get("redraw"), images)
    old = next(i for i in images if i.get("slot") == request.slot)
    attempt = int(state.get("attempt") or 0) + 1
    with stage_events(runtime.stream_writer, NODE, attempt):
        new = await draw_card(
            ctx,
            _plan_for(state, old),
            state,
            runtime.stream_writer,
            prompt=request.prompt,
            variant=int(old.get("variant") or 0) + 1,
        )
    images = [new if i.get("slot") == request.slot else i for i in images]
    return {
        "images": images,
        "generated_image_asset_ids": [i["asset_id"] for i in images],
        "draft_source": "card",
        "redraw": None,
        "failure": None,
    }
