"""Campaigns: one brief → a calendar of posts, a post per platform, approved, published on time.

    POST   /campaigns                               create a campaign (its plan starts)
    POST   /campaigns/search                        the caller's campaigns
    GET    /campaigns/{c}                           one campaign
    PATCH  /campaigns/{c}                           its name, metadata, approval, publisher
    DELETE /campaigns/{c}                           delete it (its threads and runs stay)
    POST   /campaigns/{c}/plan                      ask for the plan again (before writing)
    POST   /campaigns/{c}/start                     start writing a planned campaign
    GET    /campaigns/{c}/items                     the calendar: items, slots, posts
    POST   /campaigns/{c}/items                     add an item
    PATCH  /campaigns/{c}/items/{i}                 change a planned item's topic or slot
    DELETE /campaigns/{c}/items/{i}                 drop a planned item
    POST   /campaigns/{c}/items/{i}/approve         approve its posts: published at the slot
    POST   /campaigns/{c}/items/{i}/reject          send it back: written again, with the reason
    GET    /campaigns/{c}/publications              what was handed to the publisher, and how
    GET    /campaigns/{c}/stream                    follow it (Server-Sent Events)

A campaign belongs to the API key that made it; another key gets 404. The engine's
campaigns service does the work (`engine.services.campaigns`); the page is
docs/campaigns.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    field_validator,
)
from starlette.responses import StreamingResponse

from agentkit.platforms import PlatformId
from app.access import READ, WRITE
from app.deps import CampaignsDep, PrincipalDep, SettingsDep
from app.schemas import ID_PATTERN, MAX_OFFSET, check_json_integers
from app.sse import HEARTBEAT, SSE_HEADERS
from engine import (
    MAX_ITEMS,
    CampaignRecord,
    CampaignsService,
    NotFound,
    Publication,
    dumps,
)

router = APIRouter(tags=["campaigns"])

CampaignId = Annotated[str, Path(pattern=ID_PATTERN, description="Campaign id.")]
ItemId = Annotated[str, Path(pattern=ID_PATTERN, description="Item id.")]

#: Seconds between two looks at a followed campaign.
STREAM_POLL = 1.0
#: Largest `metadata`, in keys and bytes of JSON.
MAX_METADATA_KEYS = 64
MAX_METADATA_BYTES = 16_384
#: Years a window or a slot may fall in.
FIRST_YEAR, LAST_YEAR = 2000, 2200

PostField = Literal["title", "body", "tags", "image_urls", "platform", "topic"]
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")]
Url = Annotated[
    str,
    StringConstraints(max_length=2048, pattern=r"^https?://[^\s]+$"),
    Field(description="The publisher's URL (http or https).", examples=["https://example.com/p"]),
]
Text = Annotated[str, StringConstraints(max_length=200)]


def _in_years(value: datetime | None) -> datetime | None:
    if value is not None and not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"must fall in the years {FIRST_YEAR}-{LAST_YEAR}")
    return value


def _metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"metadata may have at most {MAX_METADATA_KEYS} keys")
    if value is not None and len(dumps(value).encode()) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata may be at most {MAX_METADATA_BYTES} bytes of JSON")
    return check_json_integers(value)


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be blank")
    return value


class WindowIn(BaseModel):
    """When posts may go out (core/slots.py: docs/platforms.md, "Publishing slots")."""

    model_config = ConfigDict(extra="forbid")

    start: datetime = Field(
        description="The window's start (ISO 8601; without an offset: local time in `timezone`).",
        examples=["2026-03-02T00:00:00"],
    )
    end: datetime = Field(description="The window's end, after its start (at most 400 days).")
    timezone: str = Field(
        min_length=1, max_length=64, description="IANA time zone.", examples=["Asia/Shanghai"]
    )
    days: list[StrictInt | Annotated[str, StringConstraints(max_length=10)]] | None = Field(
        default=None,
        min_length=1,
        max_length=7,
        description="Weekdays posts may go out: 1 (Monday) … 7, or mon … sun (default all).",
        examples=[[1, 3, 5]],
    )
    times: list[Annotated[str, StringConstraints(max_length=11)]] | None = Field(
        default=None,
        min_length=1,
        max_length=48,
        description="Local times: ranges `09:00-12:00` or times `20:00` (default all day).",
        examples=[["09:00-12:00", "20:00"]],
    )
    min_gap_minutes: StrictInt = Field(
        default=0,
        ge=0,
        le=10080,
        description="Minutes between two posts on one platform, at least.",
        examples=[240],
    )

    _years = field_validator("start", "end")(_in_years)


class WebhookPublisher(BaseModel):
    """Publish by POSTing each post to a URL, signed (the webhook outbox)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["webhook"]
    url: Url


class McpPublisher(BaseModel):
    """Publish by calling a tool of an MCP server (Streamable HTTP)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mcp"]
    url: Url
    tool: ToolName = Field(description="The tool to call.", examples=["publish_content"])
    arguments: dict[ToolName, PostField] | None = Field(
        default=None,
        max_length=16,
        description="Tool argument → post field (default: each post field under its own name).",
        examples=[{"title": "title", "content": "body", "images": "image_urls", "tags": "tags"}],
    )


Publisher = Annotated[WebhookPublisher | McpPublisher, Field(discriminator="type")]


class CampaignCreate(BaseModel):
    """Body of `POST /campaigns`."""

    model_config = ConfigDict(extra="forbid")

    assistant_id: str = Field(
        min_length=1,
        max_length=128,
        description="The assistant writing the posts: atelier, or a brand preset of it.",
        examples=["atelier"],
    )
    brief: str = Field(
        min_length=1,
        max_length=4000,
        description="The campaign's brief.",
        examples=["秋季护肤新品上市：讲清楚成分、用法和真实体验，面向大学生"],
    )
    posts: StrictInt = Field(ge=1, le=MAX_ITEMS, description="How many posts.", examples=[6])
    platforms: list[PlatformId] = Field(
        min_length=1,
        max_length=7,
        description="The platforms every post goes to (ids of the rules table).",
        examples=[["xiaohongshu", "weibo"]],
    )
    window: WindowIn
    approval: Literal["required", "auto"] = Field(
        default="required",
        description="required: a person approves each post; auto: posts are approved (and "
        "the campaign starts) by themselves.",
    )
    publisher: Publisher | None = Field(
        default=None, description="Where approved posts go at their slot (null: nowhere)."
    )
    name: Text | None = None
    metadata: dict[str, Any] | None = None

    _brief = field_validator("brief")(_not_blank)
    _meta = field_validator("metadata")(_metadata)


class CampaignUpdate(BaseModel):
    """Body of `PATCH /campaigns/{campaign_id}`: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    name: Text | None = None
    metadata: dict[str, Any] | None = None
    approval: Literal["required", "auto"] | None = None
    publisher: Publisher | None = Field(
        default=None, description="A new publisher (for posts approved from now on); null: none."
    )

    _meta = field_validator("metadata")(_metadata)


class CampaignSearch(BaseModel):
    """Body of `POST /campaigns/search`."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["planning", "planned", "running", "completed", "failed"] | None = None
    limit: StrictInt = Field(default=10, ge=1, le=100)
    offset: StrictInt = Field(default=0, ge=0, le=MAX_OFFSET)


class ItemCreate(BaseModel):
    """Body of `POST /campaigns/{campaign_id}/items`."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1, max_length=120, description="The post's topic.")
    angle: Text = Field(default="", description="How and for whom.")
    key_points: list[Text] = Field(default_factory=list, max_length=6)
    first_platform: PlatformId | None = Field(
        default=None, description="The platform written first (default: the campaign's first)."
    )
    slot: datetime | None = Field(
        default=None, description="When it goes out (default: the next free slot)."
    )

    _topic = field_validator("topic")(_not_blank)
    _slot = field_validator("slot")(_in_years)


class ItemUpdate(BaseModel):
    """Body of `PATCH /campaigns/{campaign_id}/items/{item_id}`: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    topic: str | None = Field(default=None, min_length=1, max_length=120)
    angle: Text | None = None
    key_points: list[Text] | None = Field(default=None, max_length=6)
    slot: datetime | None = Field(default=None, description="A new slot inside the window.")

    _topic = field_validator("topic")(_not_blank)
    _slot = field_validator("slot")(_in_years)


class Rejection(BaseModel):
    """Body of `POST /campaigns/{campaign_id}/items/{item_id}/reject`."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1,
        max_length=1000,
        description="What to change: the writer reads it when it writes the item again.",
        examples=["标题太平淡，突出“三天见效”之外的真实体验"],
    )

    _reason = field_validator("reason")(_not_blank)


class PlatformPost(BaseModel):
    """A post as its platform (and the publisher) gets it."""

    title: str
    body: str = Field(description="Plain text, as the platform receives it.")
    tags: list[str]
    image_urls: list[str] = Field(description="Absolute URLs that load without an API key.")
    platform: str
    topic: str


class PostOut(BaseModel):
    """One platform's post of an item."""

    platform: str
    status: Literal["planned", "writing", "pending_review", "approved", "published", "failed"]
    thread_id: str | None = Field(description="The thread it was written on (edit it there).")
    run_id: str | None
    post: PlatformPost | None
    error: str | None = Field(description="Why it failed (its failing checks, named).")
    publication_id: str | None


class ItemOut(BaseModel):
    """An item of the calendar."""

    item_id: str
    topic: str
    angle: str
    key_points: list[str]
    slot: str = Field(description="When it goes out (ISO 8601, UTC).")
    status: Literal[
        "planned", "writing", "pending_review", "approved", "published", "rejected", "failed"
    ]
    generation: int = Field(description="1, and one more each time it was rejected.")
    reason: str | None = Field(description="The last rejection's reason.")
    posts: list[PostOut]


class CampaignOut(BaseModel):
    """A campaign."""

    campaign_id: str
    name: str | None
    assistant_id: str
    brief: str
    posts: int
    platforms: list[str]
    window: dict[str, Any]
    approval: Literal["required", "auto"]
    publisher: dict[str, Any] | None
    status: Literal["planning", "planned", "running", "completed", "failed"]
    message: str | None = Field(description="What the plan said, or why it failed.")
    metadata: dict[str, Any]
    plan_run_id: str | None = Field(description="The planner's run (on `plan_thread_id`).")
    plan_thread_id: str | None
    items: dict[str, int] = Field(description="How many items are in each status.")
    created_at: str
    updated_at: str


class PublicationOut(BaseModel):
    """An approved post handed to the publisher at its slot."""

    publication_id: str
    item_id: str
    platform: str
    publisher: Literal["webhook", "mcp"]
    status: Literal["scheduled", "sending", "retrying", "published", "failed", "unknown"]
    attempts: int
    slot: str = Field(description="When it is (was) due: ISO 8601, UTC.")
    next_attempt_at: str | None
    published_at: str | None
    external_id: str | None = Field(description="The id the publisher returned.")
    answer: str | None = Field(description="The start of the publisher's answer.")
    error: str | None


async def _out(campaigns: CampaignsService, campaign: CampaignRecord) -> dict[str, Any]:
    view = await campaigns.view(campaign.owner, campaign.campaign_id)
    return dict(view["campaign"])


async def _item_out(
    campaigns: CampaignsService, owner: str, campaign_id: str, item_id: str
) -> dict[str, Any]:
    view = await campaigns.view(owner, campaign_id)
    for item in view["items"]:
        if item["item_id"] == item_id:
            return dict(item)
    raise NotFound(f"item {item_id!r} not found in campaign {campaign_id!r}")


CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "The campaign or item is not in a state that allows it."}
}
#: What starting a run (a plan) may answer besides.
STARTS_A_RUN: dict[int | str, dict[str, Any]] = {
    503: {"description": "The database takes no writes right now; retry later."},
}


@router.post(
    "/campaigns",
    response_model=CampaignOut,
    status_code=201,
    summary="Create a campaign",
    responses={
        404: {"description": "The body names an assistant this server does not run."},
        409: {"description": "The server is shutting down."},
        **STARTS_A_RUN,
    },
    dependencies=[WRITE],
)
async def create_campaign(
    body: CampaignCreate, request: Request, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Store a campaign and start planning it (its planner run)."""
    campaign = await campaigns.create(
        owner,
        assistant_id=body.assistant_id,
        brief=body.brief,
        posts=body.posts,
        platforms=list(body.platforms),
        window=body.window.model_dump(mode="json", exclude_none=True),
        approval=body.approval,
        publisher=body.publisher.model_dump(mode="json") if body.publisher else None,
        name=body.name,
        metadata=body.metadata,
        base_url=str(request.base_url),
    )
    return await _out(campaigns, campaign)


@router.post(
    "/campaigns/search",
    response_model=list[CampaignOut],
    summary="Search campaigns",
    dependencies=[READ],
)
async def search_campaigns(
    body: CampaignSearch, campaigns: CampaignsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's campaigns (of one status), newest first."""
    found = await campaigns.search(owner, status=body.status, limit=body.limit, offset=body.offset)
    return [campaigns.campaign_json(campaign) for campaign in found]


@router.get(
    "/campaigns/{campaign_id}",
    response_model=CampaignOut,
    summary="Get a campaign",
    dependencies=[READ],
)
async def get_campaign(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return one of the caller's campaigns, with how many items are in each status."""
    return dict((await campaigns.view(owner, campaign_id))["campaign"])


@router.patch(
    "/campaigns/{campaign_id}",
    response_model=CampaignOut,
    summary="Update a campaign",
    dependencies=[WRITE],
)
async def patch_campaign(
    campaign_id: CampaignId, body: CampaignUpdate, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Change a campaign's name, metadata, approval mode or publisher."""
    changes: dict[str, Any] = {}
    for name in ("name", "metadata", "approval"):
        if name in body.model_fields_set and getattr(body, name) is not None:
            changes[name] = getattr(body, name)
    if "publisher" in body.model_fields_set:
        changes["publisher"] = body.publisher.model_dump(mode="json") if body.publisher else None
    campaign = await campaigns.update(owner, campaign_id, changes)
    return await _out(campaigns, campaign)


@router.delete(
    "/campaigns/{campaign_id}", status_code=204, summary="Delete a campaign", dependencies=[WRITE]
)
async def delete_campaign(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> Response:
    """Delete a campaign and its publications (its threads and runs stay)."""
    await campaigns.delete(owner, campaign_id)
    return Response(status_code=204)


@router.post(
    "/campaigns/{campaign_id}/plan",
    response_model=CampaignOut,
    summary="Plan a campaign again",
    responses={**CONFLICT, **STARTS_A_RUN},
    dependencies=[WRITE],
)
async def plan_campaign(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Ask the planner for a new plan whose topics differ from the current ones."""
    return await _out(campaigns, await campaigns.plan_again(owner, campaign_id))


@router.post(
    "/campaigns/{campaign_id}/start",
    response_model=CampaignOut,
    summary="Start writing a campaign",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def start_campaign(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Start writing a planned campaign's items."""
    return await _out(campaigns, await campaigns.start(owner, campaign_id))


@router.get(
    "/campaigns/{campaign_id}/items",
    response_model=list[ItemOut],
    summary="A campaign's items",
    dependencies=[READ],
)
async def list_items(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the calendar: each item with its topic, slot, status and posts, by slot."""
    return list((await campaigns.view(owner, campaign_id))["items"])


@router.post(
    "/campaigns/{campaign_id}/items",
    response_model=ItemOut,
    status_code=201,
    summary="Add an item",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def add_item(
    campaign_id: CampaignId, body: ItemCreate, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Add an item to a campaign's plan (a planned or running campaign)."""
    _, item = await campaigns.add_item(
        owner,
        campaign_id,
        topic=body.topic,
        angle=body.angle,
        key_points=body.key_points,
        first_platform=body.first_platform,
        slot=body.slot,
    )
    return await _item_out(campaigns, owner, campaign_id, item.item_id)


@router.patch(
    "/campaigns/{campaign_id}/items/{item_id}",
    response_model=ItemOut,
    summary="Change a planned item",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def patch_item(
    campaign_id: CampaignId,
    item_id: ItemId,
    body: ItemUpdate,
    campaigns: CampaignsDep,
    owner: PrincipalDep,
) -> dict[str, Any]:
    """Change a planned item's topic, angle, key points or slot (before it is written)."""
    changes = {
        name: getattr(body, name)
        for name in body.model_fields_set
        if getattr(body, name) is not None
    }
    await campaigns.edit_item(owner, campaign_id, item_id, changes)
    return await _item_out(campaigns, owner, campaign_id, item_id)


@router.delete(
    "/campaigns/{campaign_id}/items/{item_id}",
    status_code=204,
    summary="Drop a planned item",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def drop_item(
    campaign_id: CampaignId, item_id: ItemId, campaigns: CampaignsDep, owner: PrincipalDep
) -> Response:
    """Drop a planned item (before it is written)."""
    await campaigns.drop_item(owner, campaign_id, item_id)
    return Response(status_code=204)


@router.post(
    "/campaigns/{campaign_id}/items/{item_id}/approve",
    response_model=ItemOut,
    summary="Approve an item's posts",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def approve_item(
    campaign_id: CampaignId, item_id: ItemId, campaigns: CampaignsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Approve the item's posts as they are now: each goes out at its slot (or the next free)."""
    await campaigns.approve(owner, campaign_id, item_id)
    return await _item_out(campaigns, owner, campaign_id, item_id)


@router.post(
    "/campaigns/{campaign_id}/items/{item_id}/reject",
    response_model=ItemOut,
    summary="Reject an item",
    responses=CONFLICT,
    dependencies=[WRITE],
)
async def reject_item(
    campaign_id: CampaignId,
    item_id: ItemId,
    body: Rejection,
    campaigns: CampaignsDep,
    owner: PrincipalDep,
) -> dict[str, Any]:
    """Send an item back: it is written again, the reason in the writer's request."""
    await campaigns.reject(owner, campaign_id, item_id, body.reason)
    return await _item_out(campaigns, owner, campaign_id, item_id)


@router.get(
    "/campaigns/{campaign_id}/publications",
    response_model=list[PublicationOut],
    summary="A campaign's publications",
    dependencies=[READ],
)
async def list_publications(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return what was handed to the publisher, by slot: status, attempts, answer, error."""
    found: list[Publication] = await campaigns.publications(owner, campaign_id)
    return [publication.to_json() for publication in found]


STREAM_EXAMPLE = (
    'id: 1\nevent: metadata\ndata: {"campaign_id":"…"}\n\n'
    'id: 2\nevent: campaign\ndata: {"campaign_id":"…","status":"planning",…}\n\n'
    'id: 3\nevent: item\ndata: {"item_id":"…","status":"pending_review",…}\n\n'
    'id: 4\nevent: publication\ndata: {"publication_id":"…","status":"published",…}\n\n'
    'id: 5\nevent: end\ndata: {"status":"completed"}\n\n'
)
STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `metadata` first; then the campaign, each item "
        "and each publication as a frame (`campaign`, `item`, `publication`) when it "
        "changes (all of them at first); `: heartbeat` comments while idle; `end` once the "
        "campaign completed and every publication ended, or it was deleted.",
        "content": {
            "text/event-stream": {
                "schema": {
                    "title": "CampaignStreamFrame",
                    "type": "object",
                    "required": ["id", "event", "data"],
                    "properties": {
                        "id": {"type": "string", "pattern": "^[1-9][0-9]*$"},
                        "event": {
                            "type": "string",
                            "enum": ["metadata", "campaign", "item", "publication", "end"],
                        },
                        "data": {
                            "anyOf": [
                                {"$ref": "#/components/schemas/CampaignOut"},
                                {"$ref": "#/components/schemas/ItemOut"},
                                {"$ref": "#/components/schemas/PublicationOut"},
                                {"type": "object"},
                            ]
                        },
                    },
                },
                "example": STREAM_EXAMPLE,
            }
        },
    }
}


def _frame(number: int, event: str, data: Any) -> bytes:
    return f"id: {number}\nevent: {event}\ndata: {dumps(data)}\n\n".encode()


async def follow_campaign(
    campaigns: CampaignsService, owner: str, campaign_id: str, heartbeat: float
) -> AsyncIterator[bytes]:
    """Yield a campaign's frames: what changed since the last look, every `STREAM_POLL` s."""
    number = 1
    yield _frame(number, "metadata", {"campaign_id": campaign_id})
    sent: dict[tuple[str, str], str] = {}
    quiet_since = time.monotonic()
    while True:
        try:
            view = await campaigns.view(owner, campaign_id)
        except NotFound:
            yield _frame(number + 1, "end", {"status": "deleted"})
            return
        changed = [("campaign", campaign_id, view["campaign"])]
        changed += [("item", i["item_id"], i) for i in view["items"]]
        changed += [("publication", p["publication_id"], p) for p in view["publications"]]
        for event, key, data in changed:
            text = dumps(data)
            if sent.get((event, key)) != text:
                sent[(event, key)] = text
                number += 1
                quiet_since = time.monotonic()
                yield _frame(number, event, data)
        status = view["campaign"]["status"]
        ended = all(p["status"] in ("published", "failed", "unknown") for p in view["publications"])
        if status == "completed" and ended:
            yield _frame(number + 1, "end", {"status": status})
            return
        if time.monotonic() - quiet_since >= heartbeat:
            quiet_since = time.monotonic()
            yield HEARTBEAT
        await asyncio.sleep(min(STREAM_POLL, heartbeat))


@router.get(
    "/campaigns/{campaign_id}/stream",
    response_class=StreamingResponse,
    summary="Follow a campaign",
    responses=STREAM_RESPONSE,
    dependencies=[READ],
)
async def stream_campaign(
    campaign_id: CampaignId, campaigns: CampaignsDep, owner: PrincipalDep, settings: SettingsDep
) -> StreamingResponse:
    """Follow a campaign's planning, writing, approval and publishing as they happen."""
    await campaigns.get(owner, campaign_id)
    body = follow_campaign(campaigns, owner, campaign_id, settings.sse_heartbeat_interval)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


__all__ = ["follow_campaign", "router"]
