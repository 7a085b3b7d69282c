"""The writer: writes the post in plain Markdown, the one agent whose tokens stream to users.

Its system prompt carries its platform's rules and the advertising-law words, from
data (`system_text`), so it is told what the critic's code checks. A run written
for a brand (`state["brand"]`, a preset) has the brand's name, voice
and terms in the writer's system prompt (`brand_rules`).

The same writer also adapts a finished post for another platform, outside the team:
`adapt_post` is the pipeline's `adapter` node for runs whose input carries
`adapt_from` (`agentkit.adaptation`).

A tool call would hide the text until it is complete, so the writer answers in
a fixed plain-text format (see `prompts.writer`) that streams token by token in
LangGraph's `messages` mode, and `parse_post` turns it into {title, body, tags}.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.adaptation import reused_images
from agentkit.chat import base_url_of, draft_text, post_message_update
from agentkit.checks import normalize_tags
from agentkit.common import agent_error, build_messages, clear_agent_error, parse_constraints
from agentkit.compliance import writer_rules as compliance_rules
from agentkit.context import AtelierContext, context_of
from agentkit.platforms import platform_rules, writer_rules
from agentkit.post import DEFAULT_PLATFORM, MODEL_CRASHED_MESSAGE, effective_request, post_platform
from agentkit.state import PipelineState, TeamOutput, TeamState
from core.events import AttemptStarted, emit, stage_events
from prompts import writer as prompt
from providers.llm import model_crash

log = logging.getLogger(__name__)

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


def tag_cap(constraints: Mapping[str, Any] | None, platform: str) -> int | None:
    """Return the most tags a post may keep: the lower of the constraints' and the platform's."""
    rules = platform_rules(platform)
    caps = [parse_constraints(constraints).tag_max, rules.tags_max if rules else None]
    found = [cap for cap in caps if cap is not None]
    return min(found) if found else None


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
    tag_max = tag_cap(state.get("constraints"), state.get("platform") or DEFAULT_PLATFORM)
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


# ---------------------------------------------------------------------------
# Adapting a finished post for another platform (agentkit.adaptation)
# ---------------------------------------------------------------------------

#: What the adapter shows of the run: the request (with the post to adapt), the plan,
#: its constraints, the notes and, on a retry, the critic's verdict.
ADAPT_SECTIONS = ("request", "intent", "constraints", "notes", "retry")
#: What an attempt of the team would have produced; the adapter leaves it empty, so
#: the critic never judges an artefact of another attempt.
_EMPTY_LISTS = ("body_blocks", "image_plans", "generated_image_asset_ids", "images", "team_log")

ADAPT_FAILED_MESSAGE = (
    "改编这篇帖子时写作模型出错（模型服务不可用或超时，已自动重试）。请确认模型服务可用后重试。"
)


def _cleared_team_output() -> dict[str, Any]:
    cleared: dict[str, Any] = dict.fromkeys(
        TeamOutput.__required_keys__ | TeamOutput.__optional_keys__
    )
    cleared.update({name: [] for name in _EMPTY_LISTS}, quality_scores={})
    return cleared


def _adapt_view(state: Mapping[str, Any], platform: str) -> dict[str, Any]:
    """Return the state as the adapter's prompt reads it (`agentkit.common.build_messages`)."""
    intent = dict(state.get("intent") or {})
    return {
        "request": effective_request(state),
        "platform": platform,
        "audience": intent.get("audience") or state.get("audience"),
        "intent": intent,
        "constraints": intent.get("constraints") or {},
        "knowledge_notes": list(state.get("knowledge_notes") or []),
        "retry_context": state.get("retry_context"),
        "brand": state.get("brand"),
    }


async def adapt_post(
    state: PipelineState, runtime: Runtime[AtelierContext], config: RunnableConfig
) -> dict[str, Any]:
    """Rewrite `adapt_from` for the run's platform: one attempt, the pipeline's `adapter` node.

    The writer (its role, its streamed tokens) is told the target platform's rules and
    the advertising-law words (`system_text`) and sees the post to adapt in the
    request, the plan, the notes and, on a retry, the critic's verdict. The source's
    images are reused where the target takes images (`agentkit.adaptation.
    reused_images`); nothing else of the team runs. Every team artefact is written
    back, empty where the adapter made none; a model failure ends the attempt with
    `failure`, as a broken team does (`nodes.executor`).
    """
    ctx = context_of(runtime)
    writer = runtime.stream_writer
    attempt = int(state.get("attempt") or 0) + 1
    max_attempts = max(int(state.get("max_attempts") or 1), attempt)
    emit(writer, AttemptStarted(attempt=attempt, max_attempts=max_attempts))
    with stage_events(writer, "adapter", attempt):
        platform = post_platform(state)
        rules = platform_rules(platform)
        view = _adapt_view(state, platform)
        task = prompt.ADAPT_REVISE_TASK if view["retry_context"] else prompt.ADAPT_TASK
        system = system_text(view) + prompt.ADAPT_ROLE
        messages = build_messages(system, view, ADAPT_SECTIONS, AGENT, task=task)
        try:
            reply = await ctx.models(AGENT).ainvoke(messages)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            log.warning("adapting the post failed", exc_info=True)
            crash = model_crash(exc)
            message = MODEL_CRASHED_MESSAGE.format(reason=crash) if crash else ADAPT_FAILED_MESSAGE
            return {**_cleared_team_output(), "failure": {"stage": "adapter", "message": message}}
        post = parse_post(str(reply.text))
        source: Mapping[str, Any] = state.get("adapt_from") or {}
        tags = post.tags or normalize_tags(source.get("tags"))
        tag_max = tag_cap(view["constraints"], platform)
        content = {"title": post.title, "body": post.body, "tags": tags[:tag_max]}
        ids = reused_images(state.get("adapt_from"), rules)
        images = [
            {"asset_id": asset_id, "url": f"/assets/{asset_id}", "slot": slot, "alt": ""}
            for slot, asset_id in enumerate(ids, start=1)
        ]
        update = {
            **_cleared_team_output(),
            "generated_content": content,
            "draft_message_id": reply.id,
            "generated_image_asset_ids": ids,
            "images": images,
            "failure": None,
        }
        # The draft, in the conversation where its tokens streamed (as the executor does).
        text = draft_text(content, images, base_url_of(config), ctx.asset_links)
        update.update(post_message_update(text, reply.id, state.get("post_message_id")))
        return update
