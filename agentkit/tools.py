"""Tools the team's agents can call.

`search_knowledge` serves the supervisor's look-ups and the research agent's tool
loop; `generate_image` serves the image agent's. Both run inside LangGraph
`ToolNode`s, which inject a `ToolRuntime` (the run's context, the graph state and
its stream writer) and run the calls of one message concurrently.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Literal, cast

import httpx
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime

from agentkit.context import context_of
from agentkit.run_owner import knowledge_namespaces, note_principal
from core.events import AssetCreated, emit
from providers.images import ImageProviderError, ImageRequest

log = logging.getLogger(__name__)

_HEX = re.compile(r"^#[0-9a-f]{6}$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+)$")


@tool
async def search_knowledge(query: str, runtime: ToolRuntime[Any, Any]) -> str:
    """Search the team's knowledge vault for notes relevant to a query.

    Searches the run's scope only (`agentkit.run_owner`): its brand's namespace and the
    shared one, the notes of the run's API key and of no key.

    Args:
        query: Keywords or a question, in the post's language (e.g. "学生党 平价 保湿").
    """
    query = query.strip()[:200]
    if not query:
        return "空查询：请给出关键词。"
    ctx = context_of(runtime)
    result = await ctx.notes.search(
        query,
        limit=5,
        namespaces=knowledge_namespaces(runtime.state or {}),
        principal=note_principal(runtime.config),
    )
    if not result.notes:
        return f"知识库中没有与「{query}」相关的笔记。"
    lines = [
        f"[{note.id}] ({note.type.value}, 相关度 {result.scores.get(note.id, 0):.2f}) "
        f"{note.content}"
        for note in result.notes
    ]
    return "\n".join(lines)


# --- images ------------------------------------------------------------------------


def post_sections(state: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return the post's sections as (heading, text), for the text of content cards.

    The research agent's body blocks when there are some, else the writer's body
    split at Markdown headings and blank lines.
    """
    blocks = state.get("body_blocks") or []
    if blocks:
        return [(str(b.get("heading") or ""), str(b.get("text") or "")) for b in blocks]
    body = str((state.get("generated_content") or {}).get("body") or "")
    sections: list[tuple[str, str]] = []
    heading = ""
    lines: list[str] = []
    for line in [*body.split("\n"), ""]:
        match = _HEADING.match(line)
        if match or not line.strip():
            if lines:
                sections.append((heading, "\n".join(lines)))
                heading, lines = "", []
            if match:
                heading = match.group(1).strip()
            continue
        lines.append(line.strip())
    return sections


def image_request(
    plan: Mapping[str, Any], state: Mapping[str, Any], prompt: str = ""
) -> ImageRequest:
    """Build the provider request of one plan: card text from the post, palette from the references.

    The cover shows the post's title (else the brief's topic) over the brief's
    goal; content card n shows section n-1 of the post (`post_sections`), else
    the plan's description.
    """
    slot = int(plan["slot"])
    planned = plan.get("type")
    kind = cast(
        Literal["cover", "content", "detail"],
        planned if planned in ("cover", "content", "detail") else "content",
    )
    desc = str(plan.get("desc") or "")
    brief = state.get("creative_brief") or {}
    if kind == "cover":
        title = str(
            (state.get("generated_content") or {}).get("title") or brief.get("topic") or desc
        )
        text = str(brief.get("goal") or desc)
    else:
        sections = post_sections(state)
        heading, text = sections[slot - 2] if 0 <= slot - 2 < len(sections) else ("", "")
        title, text = heading or desc, text or desc
    palette = [
        c
        for c in (state.get("reference_analyses") or {}).get("palette") or []
        if _HEX.match(str(c))
    ]
    return ImageRequest(
        slot=slot,
        kind=kind,
        title=title[:200],
        text=text[:4000],
        prompt=(prompt or str(plan.get("prompt") or desc))[:4000],
        palette=palette or None,
    )


async def draw_card(
    ctx: Any,
    plan: Mapping[str, Any],
    state: Mapping[str, Any],
    writer: Any,
    *,
    prompt: str = "",
    variant: int = 0,
) -> dict[str, Any]:
    """Draw the image of one plan, store it, announce it (`asset.created`) and describe it.

    Shared by the image agent's `generate_image` tool and `nodes.redraw_card`, so a card
    drawn again is made exactly like the first one, only as another `variant`.

    Returns:
        `{asset_id, url, slot, alt, path, variant}` of the stored image.

    Raises:
        ImageProviderError, ValueError, OSError, httpx.HTTPError: The image could not be made.
    """
    slot = int(plan["slot"])
    provider = ctx.image_provider(state.get("image_provider"))
    request = image_request(plan, state, prompt.strip()).model_copy(update={"variant": variant})
    image = await provider.generate(request)
    record = await ctx.assets.aput(
        image.data,
        image.content_type,
        meta={"slot": slot, "prompt": request.prompt, "provider": provider.name},
    )
    emit(writer, AssetCreated(asset_id=record.asset_id, url=record.url, slot=slot))
    return {
        "asset_id": record.asset_id,
        "url": record.url,
        "slot": slot,
        "alt": str(plan.get("desc") or ""),
        "path": str(record.path),
        "variant": variant,
    }


@tool(response_format="content_and_artifact")
async def generate_image(
    slot: int, runtime: ToolRuntime[Any, Any], prompt: str = ""
) -> tuple[str, dict[str, Any] | None]:
    """Draw the image of one image plan and store it.

    Args:
        slot: The plan's slot number (1 is the cover).
        prompt: Visual description (subject, composition, light, colours); empty uses the plan's.
    """
    state = runtime.state if isinstance(runtime.state, Mapping) else {}
    plan = next((p for p in state.get("image_plans") or [] if p.get("slot") == slot), None)
    if plan is None:
        return f"没有 slot {slot} 的图片计划。", None
    try:
        image_info = await draw_card(
            context_of(runtime), plan, state, runtime.stream_writer, prompt=prompt
        )
    except (ImageProviderError, ValueError, OSError, httpx.HTTPError) as exc:
        # The provider's messages are written to be safe to show (no secrets).
        log.warning("image for slot %s failed: %s", slot, exc)
        reason = str(exc) if isinstance(exc, ImageProviderError) else type(exc).__name__
        return f"slot {slot} 生成失败：{reason}", None
    return f"slot {slot} 已生成：{image_info['url']}", image_info
