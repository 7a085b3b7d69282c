"""Tools the team's agents can call."""

from __future__ import annotations

from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime

from graphs.context import context_of


@tool
async def search_knowledge(query: str, runtime: ToolRuntime) -> str:
    """Search the team's knowledge vault for notes relevant to a query.

    Args:
        query: Keywords or a question, in the post's language (e.g. "学生党 平价 保湿").
    """
    query = query.strip()[:200]
    if not query:
        return "空查询：请给出关键词。"
    ctx = context_of(runtime)
    result = await ctx.notes.search(query, limit=5)
    if not result.notes:
        return f"知识库中没有与「{query}」相关的笔记。"
    lines = [
        f"[{note.id}] ({note.type.value}, 相关度 {result.scores.get(note.id, 0):.2f}) {note.content}"
        for note in result.notes
    ]
    return "\n".join(lines)
