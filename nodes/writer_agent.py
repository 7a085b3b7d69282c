"""The writer: writes the post in plain Markdown, the one agent whose tokens stream to users.

Its system prompt carries its platform's rules and the advertising-law words, from
data (`system_text`), so it is told what the critic's code checks. A run written
for a brand (`state["brand"]`, a preset) has the brand's name, voice
and terms in the writer's system prompt (`brand_rules`).

A tool call would hide the text until it is complete, so the writer answers in
a fixed plain-text format (see `prompts.writer`) that streams token by token in
LangGraph's `messages` mode, and `parse_post` turns it into {title, body, tags}.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.chat import draft_text
from agentkit.checks import normalize_tags
from agentkit.common import agent_error, build_messages, clear_agent_error, parse_constraints
from agentkit.compliance import writer_rules as compliance_rules
from agentkit.context import AtelierContext, context_of
from agentkit.platforms import platform_rules, writer_rules
from agentkit.post import DEFAULT_PLATFORM
from agentkit.state import TeamState
from prompts import writer as prompt

AGENT = "writer_agent"
SECTIONS = (
    "request",
    "intent",
    "constraints",
    "notes",
    "retry",
    "brief",
    "evidence",
    "references",
    "layout",
    "content",
    "review",
)
#: A brand preset's term lists, which the writer is told too.
_TERMS = ("must_include", "must_avoid")

_FENCE = re.compile(r"^\s*```[\w-]*\s*$")
_TITLE = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$")
_TAG_LINE = re.compile(r"^\s*(?:[#＃][^\s#＃]+[#＃]?[\s,，、]*)+$")
_LABEL = re.compile(r"^\s*(?:\*\*)?(?:标题|title)(?:\*\*)?\s*[:：]\s*", re.IGNORECASE)


class Post(BaseModel):
    """A post as the writer wrote it."""

    title: str = Field(default="", description="The title line, without its # mark.")
    body: str = Field(default="", description="Everything between the title and the tags.")
    tags: list[str] = Field(default_factory=list, description="Tags without # marks.")


#: JSON keys a drifting writer uses for each field of the post, in preference order.
_JSON_KEYS = {
    "title": ("title", "标题"),
    "body": ("body", "content", "text", "正文", "内容"),
    "tags": ("tags", "hashtags", "标签", "话题"),
}


def _json_text(value: Any) -> str:
    """Return a JSON field as text: a list of paragraphs is joined by blank lines."""
    if isinstance(value, list):
        return "\n\n".join(str(item).strip() for item in value if str(item).strip())
    return str(value or "").strip()


def _json_post(text: str) -> Post | None:
    """Read a post the model wrote as a JSON object (bare or in a code fence), or None.

    Models trained on structured outputs often answer {"title", "body", "tags"}
    although the prompt asks for Markdown; taken as Markdown, the raw JSON would
    become the body and the title would be empty. Only an object with a body
    counts: anything else is left to the Markdown reader.
    """
    unfenced = "\n".join(line for line in text.splitlines() if not _FENCE.match(line)).strip()
    start, end = unfenced.find("{"), unfenced.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        data = json.loads(unfenced[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    fields = {
        name: next((data[key] for key in keys if data.get(key)), None)
        for name, keys in _JSON_KEYS.items()
    }
    body = _json_text(fields["body"])
    if not body:
        return None
    tags = fields["tags"]
    return Post(
        title=_json_text(fields["title"]).lstrip("#").strip(),
        body=body,
        tags=normalize_tags(tags if isinstance(tags, list | str) else None),
    )


def parse_post(text: str) -> Post:
    """Split the writer's Markdown into title, body and tags.

    The expected format is a `# ` title line, the body, and a last line of
    `#tags`. Lenient on purpose, since small models drift: a JSON object
    {"title", "body", "tags"} (bare or in a code fence) is read field by field;
    otherwise code fences are dropped, a "标题：" label is read as the title, a
    missing `# ` title takes the first line, and every trailing line made only
    of #tags counts as tags. Markdown headings inside the body (`## 小标题`) are
    kept as body text.
    """
    as_json = _json_post(text)
    if as_json is not None:
        return as_json
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if not _FENCE.match(line)]
    while lines and not lines[-1].strip():
        lines.pop()
    tags: list[str] = []
    while lines and (_TAG_LINE.match(lines[-1]) or not lines[-1].strip()):
        tags[:0] = re.findall(r"[#＃]([^\s#＃,，、]+)", lines.pop())
    while lines and not lines[0].strip():
        lines.pop(0)
    title = ""
    if lines:
        first = lines[0]
        match = _TITLE.match(first)
        if match:
            title = match.group(1)
        elif _LABEL.match(first):
            title = _LABEL.sub("", first)
        elif len(lines) > 1:
            title = first.strip().strip("*").strip()
        if title:
            lines.pop(0)
    return Post(title=title.strip(), body="\n".join(lines).strip(), tags=normalize_tags(tags))


def brand_rules(brand: Mapping[str, Any] | None) -> str:
    """Return the system prompt's lines on the run's brand: its name, voice and terms.

    Empty without a brand (or one with none of those fields); a field the preset
    leaves out is "未指定".
    """
    if not brand or not any(brand.get(k) for k in ("brand_name", "voice", *_TERMS)):
        return ""
    text = prompt.BRAND.format(
        brand_name=brand.get("brand_name") or "未指定", voice=brand.get("voice") or "未指定"
    )
    if brand.get("must_include"):
        text += prompt.MUST_INCLUDE.format(terms="、".join(brand["must_include"]))
    if brand.get("must_avoid"):
        text += prompt.MUST_AVOID.format(terms="、".join(brand["must_avoid"]))
    return text


def system_text(state: Mapping[str, Any]) -> str:
    """Return the writer's system prompt: its role, its platform's rules, the forbidden words.

    The platform's rules and the advertising-law words come from data
    (`agentkit.platforms`, `agentkit.compliance`): the writer is told what the
    critic's code checks. A run for a brand adds the brand's lines (`brand_rules`).
    """
    platform = str(state.get("platform") or DEFAULT_PLATFORM)
    rules = platform_rules(platform)
    parts = [
        prompt.SYSTEM.format(platform=rules.name if rules else platform),
        writer_rules(platform),
        compliance_rules(platform),
    ]
    return "\n\n".join(part for part in parts if part) + brand_rules(state.get("brand"))


async def writer_agent(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Write `generated_content` {title, body, tags}; streams its tokens.

    Tags the model left out are taken from the brief's keywords, and tags over
    the constraints' or the platform's `tag_max` are dropped (the last ones):
    counting is code's job, not the model's.
    """
    ctx = context_of(runtime)
    revising = bool(state.get("generated_content") or state.get("retry_context"))
    task = prompt.REVISE_TASK if revising else prompt.TASK
    messages = build_messages(system_text(state), state, SECTIONS, AGENT, task=task)
    reply = await ctx.models(AGENT).ainvoke(messages)
    post = parse_post(str(reply.text))
    if not post.body:
        return agent_error(state, AGENT, "the reply had no body")
    tags = post.tags or normalize_tags((state.get("creative_brief") or {}).get("keywords"))
    rules = platform_rules(state.get("platform") or DEFAULT_PLATFORM)
    caps = [parse_constraints(state.get("constraints")).tag_max, rules and rules.tags_max]
    tag_max = min((cap for cap in caps if cap is not None), default=None)
    if tag_max is not None:
        tags = tags[:tag_max]
    content = {"title": post.title, "body": post.body, "tags": tags}
    # The draft, in the conversation under the id its streamed tokens carry; the
    # pipeline shows it in its own (nodes.executor), the team served alone here.
    draft = AIMessage(content=draft_text(content), id=reply.id)
    return {
        "generated_content": content,
        "draft_message_id": reply.id,
        "messages": [draft],
        **clear_agent_error(state, AGENT),
    }
