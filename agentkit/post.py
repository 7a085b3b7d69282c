"""What several agents read of the post being made: its request, platform, brief and attempts.

Each rule lives here once, so a change to one agent does not ripple through the
others: the request with the user's clarification and the post to revise or adapt
(`effective_request`), the post's platform (`post_platform`), the brief's fields a
model writes (`BRIEF_WRITTEN_FIELDS`), the best judged attempt (`best_attempt`), the
card a client asks to redraw (`card_to_redraw`), a body's display blocks
(`post_blocks`: finalize shows them, the platform checks read their headings) and
the message of a crashed embedded model (`MODEL_CRASHED_MESSAGE`).

Pure functions and values: this module imports no node, no wiring and no other
studio module, so every studio module may use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: The platform a post is for when neither the planner nor the input names one.
DEFAULT_PLATFORM = "xiaohongshu"

#: The run's message when the embedded model crashed: what happened, and the remedy.
MODEL_CRASHED_MESSAGE = "内置模型崩溃了，这次运行无法继续（{reason}）。"

#: The creative brief's fields the model writes (`nodes.brief_compiler_agent.CreativeBrief`;
#: a test ties the two). The critic's deviation check reads only these of the brief
#: (`nodes.critic.team_actions`); `house_rules`, which code adds, is not among them.
BRIEF_WRITTEN_FIELDS: tuple[str, ...] = ("topic", "audience", "goal", "constraints", "keywords")


def effective_request(state: Mapping[str, Any]) -> str:
    """Return the request with any details the user added, and the post to revise or adapt.

    `previous_post` ({title, body, tags}) is the post a chat message after it asks
    to change (`agentkit.run_start.chat_start`); the planner clears it when the
    message is a new request instead. `adapt_from` is a post written for another
    platform that this run adapts (`agentkit.adaptation`).
    """
    request = str(state.get("request") or "").strip()
    clarification = state.get("clarification") or {}
    details = str(clarification.get("details") or "").strip()
    text = f"{request}\n\n补充说明：{details}" if details else request
    previous = state.get("previous_post") or {}
    if previous.get("title") or previous.get("body"):
        tags = " ".join(f"#{t}" for t in previous.get("tags") or [])
        text += (
            f"\n\n要修改的上一篇帖子：\n标题：{previous.get('title') or ''}\n"
            f"正文：\n{previous.get('body') or ''}\n标签：{tags}"
        )
    source = state.get("adapt_from") or {}
    if source.get("body"):
        tags = " ".join(f"#{t}" for t in source.get("tags") or [])
        text += (
            f"\n\n要改编的原帖（原平台：{source.get('platform') or ''}；改编为："
            f"{post_platform(state)}）：\n标题：{source.get('title') or ''}\n"
            f"正文：\n{source['body']}\n标签：{tags}"
        )
    return text


def post_platform(state: Mapping[str, Any]) -> str:
    """Return the post's platform: the planner's intent's, else the input's, else the default.

    The planner writes the intent's platform (the input's wins over its model's
    guess there), so once it has run every agent reads the same platform.
    """
    intent = state.get("intent") or {}
    return str(intent.get("platform") or state.get("platform") or DEFAULT_PLATFORM)


def best_attempt(attempts: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Return the best judged attempt: fewest failing checks, then highest score, then earliest."""
    candidates = [a for a in attempts if a.get("post")]
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda a: (
            int(a.get("failing_checks") or 0),
            -float(a.get("score") or 0.0),
            a["attempt"],
        ),
    )


class CardRedraw(BaseModel):
    """Which card to draw again (the `redraw` state value a client writes)."""

    model_config = ConfigDict(extra="forbid")

    slot: int = Field(ge=1, le=99, description="The card's slot (1 is the cover).", examples=[2])
    prompt: str = Field(
        default="",
        max_length=1000,
        description="A new visual description for generative providers; empty keeps the plan's.",
        examples=["同一主题，换成清晨窗边的柔光"],
    )


def card_to_redraw(value: Any, images: Sequence[Mapping[str, Any]]) -> CardRedraw:
    """Validate a redraw request against the post's images.

    Read by the `redraw_card` node and, before a run starts, by the HTTP API's
    command check (`app.schemas`).

    Raises:
        ValueError: The request is malformed (pydantic's message), or names no card
            of the post.
    """
    request = CardRedraw.model_validate(value if value is not None else {})
    slots = sorted(int(i["slot"]) for i in images if isinstance(i.get("slot"), int))
    if not slots:
        raise ValueError("this thread has no post with cards to redraw")
    if request.slot not in slots:
        raise ValueError(f"slot {request.slot} is not a card of this post; its cards: {slots}")
    return request


# A post body's display blocks (`post_blocks`): how finalize shows it and how the
# platform checks find its headings.
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+|【(.+)】\s*$)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•·]|\d+[.、)）])\s+")
_BOLD_LINE = re.compile(r"^\s*\*\*(.+)\*\*\s*$")


def post_blocks(body: str) -> list[dict[str, str]]:
    """Split a post body into display blocks: headings, list items and text paragraphs."""
    blocks: list[dict[str, str]] = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _HEADING.match(line) or _BOLD_LINE.match(line):
            text = line.lstrip("#").strip().strip("【】*").strip()
            blocks.append({"type": "heading", "text": text})
        elif _LIST_ITEM.match(line):
            blocks.append({"type": "list_item", "text": _LIST_ITEM.sub("", line, count=1)})
        else:
            blocks.append({"type": "text", "text": line})
    return blocks
