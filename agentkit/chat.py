"""The conversation of a run: LangChain chat input in, the post as an AI message out.

Chat clients (Agent Chat UI, `useStream`, A2A) send `messages` and render the
state's `messages` channel (PRODUCT.md §7 "Conversation"). This module reads
what they send — the request is the text of the last human message; its image
blocks are reference images — and writes what they show: a request sent as a
run's own `request` field as the user's message (`request_message`), the
planner's question and the finished post as AI messages (title, body, `#tags`,
image links).

Messages are read in either form a client or the state holds them: LangChain
message objects, or their JSON (`{"type": "human", …}` or `{"role": "user", …}`).
Pure functions: no node, wiring or other studio module is imported.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage

from providers.asset_links import AssetLinks

#: The roles that mean "the user said it", in either message form.
_HUMAN_ROLES = frozenset({"human", "user"})
_DATA_URL = re.compile(r"^data:(?P<mime>image/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)


#: The roles a client's message may have, in either form (what LangChain converts
#: without more fields; tool messages need their call's id, and a client sends none).
CLIENT_ROLES = frozenset({"human", "user", "ai", "assistant", "system", "developer"})


def malformed(message: Any) -> str | None:
    """Say what is wrong with a client's message (JSON form), or None when it is usable."""
    if not isinstance(message, Mapping):
        return "a message is an object"
    role = message.get("type", message.get("role"))
    if not isinstance(role, str) or role not in CLIENT_ROLES:
        return f"a message's type (or role) is one of {', '.join(sorted(CLIENT_ROLES))}"
    content = message.get("content")
    if not isinstance(content, str | list):
        return "a message's content is a string or a list of content blocks"
    if "id" in message and not isinstance(message["id"], str | None):
        return "a message's id is a string"
    return None


def is_human(message: Any) -> bool:
    """Tell whether a message (object or JSON) is the user's."""
    role = _field(message, "type") or _field(message, "role")
    return str(role or "") in _HUMAN_ROLES


def message_text(message: Any) -> str:
    """Return a message's text: string content as is, text blocks joined with newlines."""
    content = _field(message, "content")
    if isinstance(content, str):
        return content.strip()
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
    return "\n".join(p for p in parts if p.strip()).strip()


def last_human(messages: Sequence[Any] | None) -> Any | None:
    """Return the last human message, or None."""
    for message in reversed(list(messages or [])):
        if is_human(message):
            return message
    return None


def chat_request(messages: Sequence[Any] | None) -> str:
    """Return the request a conversation makes: the last human message's text ("" if none)."""
    message = last_human(messages)
    return message_text(message) if message is not None else ""


#: How the id of a human message this module writes for a run's `request` starts.
REQUEST_MESSAGE_PREFIX = "request-"


def request_message(
    messages: Sequence[Any] | None, request: str, message_id: str
) -> dict[str, Any] | None:
    """Return the human message that shows a run's request in its conversation, or None.

    A run started with a `request` rather than chat input (the console, curl, a
    cron, MCP, A2A) has no message of the user's: a chat UI would then label the
    thread by its post and show the post with nothing asked above it. None when
    the conversation already ends with what the user said: a human message the
    client sent (a run started with chat input; its id is kept, nothing is
    doubled), or one written here for the same text (the request sent again after
    a run that left no answer); or when the request is blank.

    The message is returned in its JSON form, which the `messages` channel's
    reducer turns into a `HumanMessage`: LangGraph's `messages` stream mode emits
    the message objects a node returns, and that stream is the writer's tokens
    only (PRODUCT.md §2.3); a client reads the request from the state.

    Args:
        messages: The conversation so far (message objects or their JSON).
        request: The run's request, verbatim.
        message_id: The new message's id; it should start with `REQUEST_MESSAGE_PREFIX`.
    """
    if not request.strip():
        return None
    last = list(messages or [])[-1:]
    if last and is_human(last[0]):
        written_here = str(_field(last[0], "id") or "").startswith(REQUEST_MESSAGE_PREFIX)
        if not written_here or message_text(last[0]) == request.strip():
            return None
    return {"type": "human", "content": request, "id": message_id}


def image_blocks(message: Any) -> list[tuple[bytes, str]]:
    """Return the images a message carries inline, as (bytes, MIME type), in order.

    Read: LangChain's `{"type": "image", "source_type": "base64", "data", "mime_type"}`
    (also with `base64` instead of `data`) and OpenAI's `{"type": "image_url",
    "image_url": {"url": "data:image/…;base64,…"}}`. Blocks that link to an image
    elsewhere or do not decode are skipped: the service fetches nothing.
    """
    content = _field(message, "content")
    found: list[tuple[bytes, str]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        data, mime = None, "image/png"
        if block.get("type") == "image":
            data = block.get("data") or block.get("base64")
            mime = str(block.get("mime_type") or mime)
            if block.get("source_type") not in (None, "base64"):
                data = None
        elif block.get("type") == "image_url":
            url = block.get("image_url")
            url = url.get("url") if isinstance(url, Mapping) else url
            matched = _DATA_URL.match(str(url or ""))
            if matched:
                data, mime = matched["data"], matched["mime"]
        if not isinstance(data, str):
            continue
        try:
            found.append((base64.b64decode(data, validate=True), mime))
        except (binascii.Error, ValueError):
            continue
    return found


def absolute_url(url: str, base_url: str | None) -> str:
    """Return `url` made absolute against the server's base URL (unchanged when absolute)."""
    if not base_url or re.match(r"^[a-z][a-z0-9+.-]*:", url):
        return url
    return f"{base_url.rstrip('/')}/{url.lstrip('/')}"


def image_link(url: str, base_url: str | None, links: AssetLinks | None = None) -> str:
    """Return an image's URL as a chat message shows it: signed when `links`, then absolute.

    With API keys on, a browser's `<img>` cannot send the key, so the link carries the
    asset's signature (`providers.asset_links`); without `links` it stays plain.
    """
    return absolute_url(links.sign(url) if links is not None else url, base_url)


def _block_text(block: Mapping[str, Any]) -> str:
    text = str(block.get("text") or "")
    kind = block.get("type")
    return f"**{text}**" if kind == "heading" else f"- {text}" if kind == "list_item" else text


def post_text(
    result: Mapping[str, Any], base_url: str | None = None, links: AssetLinks | None = None
) -> str:
    """Return a run's result as the text of a chat message (Markdown).

    A post: its title, body, `#tags` and images (absolute URLs, so a browser on
    another origin loads them; signed with `links`, see `image_link`), then the
    run's message when the post is not a plain success. No post: the run's message
    alone.
    """
    post = result.get("post") or {}
    message = str(result.get("message") or "")
    body = "\n\n".join(_block_text(b) for b in post.get("blocks") or [])
    parts: list[str] = []
    if post.get("title"):
        parts.append(f"**{post['title']}**")
    if body.strip():
        parts.append(body.strip())
    if post.get("tags"):
        parts.append(" ".join(f"#{t}" for t in post["tags"]))
    for image in result.get("images") or []:
        url = image_link(str(image.get("url") or ""), base_url, links)
        parts.append(f"![{image.get('alt') or ''}]({url})")
    if not parts or result.get("outcome") != "completed":
        parts.append(message)
    return "\n\n".join(p for p in parts if p)


def draft_text(
    content: Mapping[str, Any],
    images: Sequence[Mapping[str, Any]] = (),
    base_url: str | None = None,
    links: AssetLinks | None = None,
) -> str:
    """Return a draft {title, body, tags} and its images as the text of a chat message."""
    parts = [f"**{content['title']}**"] if content.get("title") else []
    parts.append(str(content.get("body") or "").strip())
    if content.get("tags"):
        parts.append(" ".join(f"#{t}" for t in content["tags"]))
    for image in images:
        url = image.get("url") or f"/assets/{image.get('asset_id')}"
        parts.append(f"![{image.get('alt') or ''}]({image_link(str(url), base_url, links)})")
    return "\n\n".join(p for p in parts if p)


def post_message_update(
    text: str, message_id: str | None, previous_id: str | None
) -> dict[str, Any]:
    """Return the state update that shows `text` as the run's one post message.

    The message takes `message_id` (the writer's streamed tokens' id, so the
    streamed bubble becomes the draft without a flicker), else `previous_id`, else
    a new id; an earlier draft under another id (a retry's) is removed, so the
    conversation holds one AI message per post.
    """
    new_id = message_id or previous_id or f"post-{uuid.uuid4()}"
    messages: list[BaseMessage] = []
    if previous_id and previous_id != new_id:
        messages.append(RemoveMessage(id=previous_id))
    messages.append(AIMessage(content=text, id=new_id))
    return {"messages": messages, "post_message_id": new_id}


def base_url_of(config: Mapping[str, Any] | None) -> str | None:
    """Return the server's base URL a run was started through (`configurable.base_url`)."""
    value = ((config or {}).get("configurable") or {}).get("base_url")
    return str(value) if value else None
