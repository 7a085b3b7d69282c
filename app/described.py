"""How an assistant introduces itself to other agents: MCP tools (`app.mcp`), A2A cards (`app.a2a`).

A built-in assistant is its spec's name and description. A created one (a brand
preset, `POST /assistants`) is its own name, then what it writes, read from its preset
(`agentkit.brand.preset_of`): "Writes xiaohongshu posts for 青禾护肤 (写 青禾护肤 的帖子)",
its voice (cut to `VOICE_CHARS`), and its own description, if any. The text names
nothing but what the owner saved (only the owner sees it) and never the preset's
terms or examples in full: a tool list is read by a model on every turn.
"""

from __future__ import annotations

from agentkit.brand import preset_of
from engine import Assistant

#: The most characters of a preset's voice a description repeats.
VOICE_CHARS = 160


def assistant_name(assistant: Assistant) -> str:
    """Return an assistant's display name: a created one's own, else its spec's."""
    return assistant.record.name if assistant.record is not None else assistant.spec.name


def assistant_description(assistant: Assistant) -> str:
    """Return what an assistant does, in a few sentences (see the module docstring)."""
    record = assistant.record
    if record is None:
        return assistant.spec.description
    preset = preset_of(record.context, record.config)
    brand = str(preset.get("brand_name") or "").strip()
    platform = str(preset.get("platform") or "").strip()
    posts = f"{platform} posts" if platform else "posts"
    if brand:
        what = f"Writes {posts} for {brand} (写 {brand} 的帖子)"
    else:
        what = f"Writes {posts} with a saved configuration of the {assistant.graph_id} assistant"
    sentences = [f"{record.name}: {what}."]
    voice = " ".join(str(preset.get("voice") or "").split())
    if voice:
        cut = voice if len(voice) <= VOICE_CHARS else voice[: VOICE_CHARS - 1] + "…"
        sentences.append(f"Voice: {cut}")
    if record.description:
        sentences.append(record.description.strip())
    return " ".join(sentences)
