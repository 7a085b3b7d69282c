"""Redrawing one card: only that card changes, as a new variant, and a bad slot is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agentkit.tools import draw_card
from nodes.redraw_card import redraw_card
from tests.support.fake_models import FakeModels, fake_context

PLANS = [
    {"slot": 1, "type": "cover", "desc": "封面", "prompt": "cover"},
    {"slot": 2, "type": "content", "desc": "步骤", "prompt": "steps"},
]


async def _post(ctx: Any) -> dict[str, Any]:
    state: dict[str, Any] = {
        "generated_content": {"title": "宿舍护肤三步", "body": "## 第一步\n洁面。", "tags": []},
        "image_plans": PLANS,
        "attempt": 1,
    }
    state["images"] = [await draw_card(ctx, plan, state, None) for plan in PLANS]
    return state


async def test_only_the_named_card_is_drawn_again_as_a_new_variant(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels(), tmp_path)
    state = await _post(ctx)
    events: list[dict[str, Any]] = []
    update = await redraw_card(
        {**state, "redraw": {"slot": 2}}, Runtime(context=ctx, stream_writer=events.append)
    )
    cover, card = update["images"]
    assert cover == state["images"][0]  # untouched: same asset, same URL
    assert card["slot"] == 2 and card["variant"] == 1
    assert card["asset_id"] != state["images"][1]["asset_id"]
    old_bytes = ctx.assets.path(state["images"][1]["asset_id"]).read_bytes()
    assert ctx.assets.path(card["asset_id"]).read_bytes() != old_bytes
    assert update["generated_image_asset_ids"] == [cover["asset_id"], card["asset_id"]]
    assert update["draft_source"] == "card" and update["redraw"] is None
    assert [e["type"] for e in events] == ["stage.started", "asset.created", "stage.completed"]

    again = await redraw_card(
        {**state, **update, "redraw": {"slot": 2}}, Runtime(context=ctx, stream_writer=None)
    )
    assert again["images"][1]["variant"] == 2
    assert again["images"][1]["asset_id"] not in (card["asset_id"], state["images"][1]["asset_id"])
