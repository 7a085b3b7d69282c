"""Publishing a campaign's post: a signed webhook through the outbox, or an MCP tool call.

Two transports (docs/campaigns.md):

* **webhook** — the post is queued in the webhook outbox (`engine.webhooks`) once,
  under a delivery id derived from the publication (`publication_delivery_id`), with
  the body `webhook_body` writes; the outbox's deliverer signs it (WEBHOOK_SECRET),
  sends it, retries it with backoff and records every attempt.
* **mcp** — `call_tool` calls a tool of an external MCP server (Streamable HTTP,
  the `mcp` client SDK) with the post's fields mapped to the tool's arguments
  (`tool_arguments`): e.g. xiaohongshu-mcp's `publish_content` with
  `{"title": "title", "content": "body", "images": "image_urls", "tags": "tags"}`.

The MCP connection goes through the same SSRF guard as webhooks: the URL passes
`core.outbound.OutboundRules` before each call, and the transport
(`GuardedMcpTransport`) resolves the host itself, checks every address and connects
to the checked one (the `mcp` SDK speaks `httpx2`, so the guard is written for it;
its rules are `core.outbound`'s). A call never raises: `CallOutcome` says how it went.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core.outbound import OutboundRules, address_refusal, literal_address, resolve
from engine.campaigns import Publication
from engine.serde import dumps

log = logging.getLogger(__name__)

#: Characters of a publisher's answer (or error) kept with the publication.
ANSWER_CHARS = 500
#: What a call whose sender stopped mid-call is recorded with (it is not made again).
IN_DOUBT = (
    "the process sending it stopped during the call: it may or may not have been "
    "published, and it is not sent again (check the platform)"
)
#: Keys of a tool's structured answer that carry the published post's id, by preference.
ID_KEYS = ("external_id", "id", "note_id", "post_id", "feed_id", "url")


class McpAddressRefused(httpx2.TransportError):
    """The MCP server's host is, or resolves to, an address the rules refuse; nothing was sent."""


class GuardedMcpTransport(httpx2.AsyncBaseTransport):
    """An `httpx2` transport connecting only to checked addresses (`core.outbound`'s rules)."""

    def __init__(self, *, allow_private: bool = False) -> None:
        """Refuse private addresses unless `allow_private`; a fresh connection per request."""
        self.allow_private = allow_private
        self._inner = httpx2.AsyncHTTPTransport(
            retries=0, limits=httpx2.Limits(max_keepalive_connections=0)
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Resolve, check every address, and send the request to the first one."""
        host = request.url.raw_host.decode("ascii")
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        literal = literal_address(host)
        try:
            addresses = [literal] if literal is not None else await resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpx2.ConnectError(f"cannot resolve {host!r}", request=request) from exc
        if not addresses:
            raise httpx2.ConnectError(f"{host!r} resolves to no address", request=request)
        if not self.allow_private:
            for address in addresses:
                why = address_refusal(address)
                if why is not None:
                    raise McpAddressRefused(f"refused: {host} resolves to {why}", request=request)
        pinned = str(addresses[0])
        request.url = request.url.copy_with(host=pinned)  # the Host header keeps the name
        if request.url.scheme == "https" and literal is None:
            request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._inner.aclose()


@dataclass(frozen=True)
class CallOutcome:
    """How one publishing call went."""

    ok: bool
    #: True: no further attempt can succeed (a URL the rules refuse).
    final: bool = False
    external_id: str | None = None
    answer: str | None = None
    error: str | None = None


def publication_delivery_id(publication_id: str) -> str:
    """Return the webhook delivery id of a publication: one per publication, ever."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"atelier-publication:{publication_id}"))


def webhook_body(publication: Publication) -> str:
    """Return the JSON a webhook publisher receives for a publication (docs/campaigns.md)."""
    return dumps(
        {
            "type": "campaign.publication",
            "publication_id": publication.publication_id,
            "campaign_id": publication.campaign_id,
            "item_id": publication.item_id,
            "platform": publication.platform,
            "slot": publication.slot,
            "post": publication.payload,
        }
    )


def tool_arguments(publication: Publication) -> dict[str, Any]:
    """Return the MCP tool's arguments: each tool argument gets the post field it names."""
    return {
        argument: publication.payload.get(source)
        for argument, source in publication.arguments.items()
    }


def _leaf(error: BaseException) -> BaseException:
    """Return the first error inside the task groups' exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _clip(text: str) -> str:
    return text.replace("\x00", "\ufffd")[:ANSWER_CHARS]


def _external_id(structured: Any, text: str) -> str | None:
    """Return the published post's id a tool's answer names, if any."""
    found = structured if isinstance(structured, Mapping) else None
    if found is None:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        found = parsed if isinstance(parsed, Mapping) else None
    for key in ID_KEYS:
        value = (found or {}).get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return _clip(str(value))[:200]
    return None


def _error_text(error: BaseException) -> tuple[str, bool]:
    """Return what a failed call is recorded with, and whether it is final."""
    if isinstance(error, McpAddressRefused):
        return str(error), True
    if isinstance(error, TimeoutError | httpx2.TimeoutException):
        return "the publisher did not answer in time", False
    if isinstance(error, httpx2.HTTPStatusError):
        return f"the publisher answered HTTP {error.response.status_code}", False
    if isinstance(error, httpx2.HTTPError):
        return f"could not reach the publisher ({type(error).__name__})", False
    if isinstance(error, MCPError):
        return _clip(f"the publisher refused the call: {error}"), False
    return f"the call failed ({type(error).__name__})", False


async def call_tool(
    publication: Publication,
    rules: OutboundRules,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> CallOutcome:
    """Call the publication's MCP tool once with its post; say how it went (never raises)."""
    why = rules.refusal(publication.url)
    if why is not None:
        return CallOutcome(ok=False, final=True, error=f"refused: {why}")
    assert publication.tool is not None
    client = httpx2.AsyncClient(
        transport=GuardedMcpTransport(allow_private=rules.allow_private),
        follow_redirects=False,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
        trust_env=False,
    )
    try:
        async with asyncio.timeout(connect_timeout + 3 * read_timeout):
            async with (
                client,
                streamable_http_client(publication.url, http_client=client) as (read, write),
                ClientSession(read, write, read_timeout_seconds=read_timeout) as session,
            ):
                await session.initialize()
                result: Any = await session.call_tool(publication.tool, tool_arguments(publication))
    except Exception as exc:  # every failure is the call's outcome
        error, final = _error_text(_leaf(exc))
        log.info("publication %s: the MCP call failed: %s", publication.publication_id, error)
        return CallOutcome(ok=False, final=final, error=error)
    text = "\n".join(
        str(getattr(block, "text", "")) for block in getattr(result, "content", None) or []
    ).strip()
    if getattr(result, "is_error", False):
        return CallOutcome(ok=False, error=_clip(f"the tool answered an error: {text}"))
    structured = getattr(result, "structured_content", None)
    return CallOutcome(
        ok=True, external_id=_external_id(structured, text), answer=_clip(text) or None
    )


__all__ = [
    "ANSWER_CHARS",
    "IN_DOUBT",
    "CallOutcome",
    "GuardedMcpTransport",
    "McpAddressRefused",
    "call_tool",
    "publication_delivery_id",
    "tool_arguments",
    "webhook_body",
]
