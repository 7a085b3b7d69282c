"""The reference agent: measures reference images, reads reference texts, writes style cues.

Reference images (`reference_images`, asset ids of uploads) are measured with
Pillow (`providers.vision.analyze_image`: size, aspect, dominant palette,
brightness) — numbers, not a vision model. The model turns those numbers and
the reference texts into style, tone, layout and writing cues. The palette the
image cards are painted with is the measured one whenever there are reference
images (the user's look wins over the model's taste); otherwise the model's
palette, if it wrote valid hex colours, else none (the renderer's default).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Annotated, Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.common import agent_error, build_messages, clear_agent_error, clipped, structured_call
from agentkit.context import AtelierContext, context_of
from agentkit.state import TeamState
from prompts import reference as prompt
from prompts.common import data_block
from providers.assets import is_valid_asset_id
from providers.vision import analyze_image

log = logging.getLogger(__name__)

AGENT = "reference_intelligence_agent"
SECTIONS = ("request", "intent", "notes", "retry", "brief", "review")
MAX_REFERENCE_IMAGES = 9
MAX_REFERENCE_TEXTS = 5
MAX_REFERENCE_TEXT_CHARS = 1500
MAX_PALETTE = 6

_HEX = re.compile(r"^#?([0-9a-fA-F]{6}|[0-9a-fA-F]{3})$")


class ReferenceAnalysis(BaseModel):
    """Return the style cues of the references."""

    style: Annotated[str, clipped(100)] = Field(default="", max_length=100, description="Style.")
    tone: Annotated[str, clipped(100)] = Field(default="", max_length=100, description="Tone.")
    palette: Annotated[list[str], clipped(MAX_PALETTE)] = Field(
        default_factory=list, max_length=MAX_PALETTE, description="Hex colours like #f7e6d7."
    )
    layout_cues: Annotated[list[str], clipped(8)] = Field(
        default_factory=list, max_length=8, description="Layout cues."
    )
    writing_cues: Annotated[list[str], clipped(8)] = Field(
        default_factory=list, max_length=8, description="Writing cues."
    )


def valid_palette(colours: Any) -> list[str]:
    """Return the valid hex colours of `colours` as lower-case #rrggbb, distinct, in order."""
    palette: list[str] = []
    for colour in colours if isinstance(colours, list) else []:
        match = _HEX.match(str(colour).strip())
        if match is None:
            continue
        digits = match.group(1).lower()
        hex_colour = "#" + ("".join(c * 2 for c in digits) if len(digits) == 3 else digits)
        if hex_colour not in palette:
            palette.append(hex_colour)
    return palette


async def measure_references(
    ctx: AtelierContext, asset_ids: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Measure the stored reference images; return (measurements, ids that could not be read)."""
    wanted = list(dict.fromkeys(asset_ids))[:MAX_REFERENCE_IMAGES]
    missing: list[str] = []
    paths = {}
    for asset_id in wanted:
        # A file lookup (stat): in a worker thread, off the event loop.
        path = (
            await asyncio.to_thread(ctx.assets.path, asset_id)
            if is_valid_asset_id(asset_id)
            else None
        )
        if path is None:
            missing.append(asset_id)
        else:
            paths[asset_id] = path

    async def measure(asset_id: str) -> dict[str, Any] | None:
        try:
            analysis = await asyncio.to_thread(analyze_image, paths[asset_id])
        except (ValueError, OSError) as exc:
            log.warning("reference image %s is unreadable: %s", asset_id, exc)
            return None
        return {"asset_id": asset_id, **analysis.model_dump()}

    results = await asyncio.gather(*(measure(a) for a in paths))
    measured = [r for r in results if r is not None]
    missing += [a for a, r in zip(paths, results, strict=True) if r is None]
    return measured, missing


def _merged_palette(measured: list[dict[str, Any]]) -> list[str]:
    """Interleave the images' palettes (each most-frequent first) into one palette."""
    palettes = [m["palette"] for m in measured]
    merged: list[str] = []
    for rank in range(max((len(p) for p in palettes), default=0)):
        for palette in palettes:
            if rank < len(palette) and palette[rank] not in merged:
                merged.append(palette[rank])
    return merged[:MAX_PALETTE]


async def reference_intelligence_agent(
    state: TeamState, runtime: Runtime[AtelierContext]
) -> dict[str, Any]:
    """Write `reference_analyses`: style, tone, palette, layout and writing cues."""
    ctx = context_of(runtime)
    measured, missing = await measure_references(ctx, list(state.get("reference_images") or []))
    texts = [
        str(t)[:MAX_REFERENCE_TEXT_CHARS]
        for t in (state.get("reference_texts") or [])[:MAX_REFERENCE_TEXTS]
        if str(t).strip()
    ]
    blocks = []
    if measured:
        blocks.append(
            data_block(
                "参考图测量", [{k: v for k, v in m.items() if k != "mode"} for m in measured]
            )
        )
    blocks.extend(data_block(f"参考文本{i}", text) for i, text in enumerate(texts, start=1))
    task = "\n\n".join([*blocks, prompt.TASK.format(images=len(measured), texts=len(texts))])
    messages = build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=task)
    analysis = await structured_call(ctx.models(AGENT), ReferenceAnalysis, messages)

    facts: dict[str, Any] = {"images": measured, "texts": len(texts)}
    if missing:
        facts["unreadable_images"] = missing
    if analysis is None:
        error = agent_error(state, AGENT, "no ReferenceAnalysis")
        if not measured:
            return error
        # The measurements are facts on their own: keep them, with the measured palette.
        return {"reference_analyses": {**facts, "palette": _merged_palette(measured)}, **error}

    data = analysis.model_dump()
    data["palette"] = _merged_palette(measured) if measured else valid_palette(data["palette"])
    return {"reference_analyses": {**data, **facts}, **clear_agent_error(state, AGENT)}
