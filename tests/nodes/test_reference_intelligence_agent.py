"""The reference agent: measured palettes win, unreadable references are reported."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from PIL import Image

from nodes.reference_intelligence_agent import reference_intelligence_agent, valid_palette
from tests.support.fake_models import FakeModels, fake_context, garbage, tool_call

ANALYSIS = tool_call(
    "ReferenceAnalysis",
    style="极简",
    tone="冷静",
    palette=["#000000", "nope", "#FFF"],
    layout_cues=["留白"],
    writing_cues=["短句"],
)


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (300, 400)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


async def _analyse(tmp_path: Path, reply: Any, **state: Any) -> tuple[dict[str, Any], Any]:
    models = FakeModels({"reference_intelligence_agent": reply})
    ctx = fake_context(models, tmp_path)
    ids = [ctx.assets.put(data, kind="uploaded").asset_id for data in state.pop("uploads", [])]
    runtime = Runtime(context=ctx)
    team_state: Any = {
        "request": "参考这几张图",
        "reference_images": [*ids, *state.pop("extra_ids", [])],
        **state,
    }
    update = await reference_intelligence_agent(team_state, runtime)
    return update, models


async def test_reference_images_are_measured_and_their_palette_wins(tmp_path: Path) -> None:
    update, models = await _analyse(
        tmp_path,
        ANALYSIS,
        uploads=[_png((200, 30, 30)), _png((20, 40, 200), (400, 400))],
        extra_ids=["0" * 32, "../etc/passwd"],
        reference_texts=["示例帖子：三步搞定早八妆"],
    )
    analyses = update["reference_analyses"]
    assert analyses["palette"] == ["#c81e1e", "#1428c8"]  # measured, not the model's
    assert [m["orientation"] for m in analyses["images"]] == ["portrait", "square"]
    assert analyses["unreadable_images"] == ["0" * 32, "../etc/passwd"]
    assert analyses["style"] == "极简" and analyses["texts"] == 1
    prompt = models.calls[0].prompt
    assert "#c81e1e" in prompt and "三步搞定早八妆" in prompt
    assert "<<<参考文本1>>>" in prompt


async def test_without_images_the_models_valid_colours_are_used(tmp_path: Path) -> None:
    update, _ = await _analyse(tmp_path, ANALYSIS)
    assert update["reference_analyses"]["palette"] == ["#000000", "#ffffff"]


async def test_unparsable_answer_keeps_the_measurements(tmp_path: Path) -> None:
    update, _ = await _analyse(tmp_path, garbage(), uploads=[_png((10, 200, 10))])
    assert update["reference_analyses"]["palette"] == ["#0ac80a"]
    assert update["agent_errors"][-1].startswith("reference_intelligence_agent: ")
    update, _ = await _analyse(tmp_path, garbage())
    assert "reference_analyses" not in update


def test_valid_palette() -> None:
    assert valid_palette(["#ABC", "abcdef", "#abcdef", "red", 3]) == ["#aabbcc", "#abcdef"]
    assert valid_palette("not a list") == []
