"""Campaigns: a calendar of posts written by runs, approved, then published at their slots.

The engine's part of a campaign is generic: what is stored (`CampaignRecord`, its
`CampaignItem`s with one `ItemPost` per platform, and the `Publication`s of the
approved posts), how an item moves through its statuses, when a publication is due
and how it is claimed, retried and recorded. What a campaign *means* — which
assistant plans it, how an item becomes a run's input, how a run's values become a
platform's post — is the product's, handed to the engine's opener as
`CampaignHooks` (`app.composition`). The service is `engine.services.campaigns`;
the page is docs/campaigns.md.

Statuses. A campaign is `planning` (its planner run is running), `planned` (the
plan waits for a person: edit, drop or add items, plan again, then start),
`running` (its items are being written, reviewed and published), `completed`
(every item ended) or `failed` (the plan failed; plan again). An item is
`planned` → `writing` → `pending_review` → `approved` → `published`, or
`rejected` (a person sent it back: it is written again, the reason in the
writer's request) or `failed` (a post that failed its checks after its retries,
or whose publishing failed). A publication is `scheduled` → `sending` →
`published`, with `retrying` between failed attempts, `failed` when its attempts
are spent (or its URL is refused), and `unknown` when the process sending it
stopped during the call: then nobody knows whether it went out, and it is not
sent again (at most once; check the platform).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from engine.assistants import Assistant
from engine.serde import loads

CampaignStatus = Literal["planning", "planned", "running", "completed", "failed"]
ItemStatus = Literal[
    "planned", "writing", "pending_review", "approved", "published", "rejected", "failed"
]
PostStatus = Literal["planned", "writing", "pending_review", "approved", "published", "failed"]
PublicationStatus = Literal["scheduled", "sending", "retrying", "published", "failed", "unknown"]
Approval = Literal["required", "auto"]
Transport = Literal["webhook", "mcp"]

CAMPAIGN_STATUSES: tuple[CampaignStatus, ...] = (
    "planning",
    "planned",
    "running",
    "completed",
    "failed",
)
ITEM_STATUSES: tuple[ItemStatus, ...] = (
    "planned",
    "writing",
    "pending_review",
    "approved",
    "published",
    "rejected",
    "failed",
)
PUBLICATION_STATUSES: tuple[PublicationStatus, ...] = (
    "scheduled",
    "sending",
    "retrying",
    "published",
    "failed",
    "unknown",
)
#: Campaign statuses the driver works on.
ACTIVE: tuple[CampaignStatus, ...] = ("planning", "running")
#: Publication statuses that end it.
FINAL_PUBLICATION: frozenset[str] = frozenset({"published", "failed", "unknown"})
#: The post fields a publisher's argument mapping may name.
POST_FIELDS: tuple[str, ...] = ("title", "body", "tags", "image_urls", "platform", "topic")
#: Runs one campaign has in flight at most (its planner's, its posts').
RUNS_AT_ONCE = 3
#: Times one item may be written again after a rejection.
MAX_REWRITES = 10
#: The most items one campaign holds.
MAX_ITEMS = 60
#: Campaigns one API key keeps at most (deleting one makes room).
MAX_CAMPAIGNS_PER_OWNER = 500


@dataclass(slots=True)
class ItemPost:
    """One platform's post of an item: the run that writes it and what it wrote."""

    platform: str
    status: PostStatus = "planned"
    thread_id: str | None = None
    run_id: str | None = None
    #: The platform's post as the product reads it from the run (`CampaignHooks.read_post`).
    post: dict[str, Any] | None = None
    #: Why it failed (its failing checks, or the run's error).
    error: str | None = None


@dataclass(slots=True)
class CampaignItem:
    """One post of the calendar: its topic, slot and a post per platform (first one first)."""

    item_id: str
    topic: str
    angle: str
    key_points: list[str]
    #: When it goes out: ISO 8601 in UTC.
    slot: str
    posts: list[ItemPost]
    status: ItemStatus = "planned"
    #: 1, then one more each time a person rejects it.
    generation: int = 1
    #: The last rejection's reason (the next writing's request carries it).
    reason: str | None = None

    @property
    def platforms(self) -> list[str]:
        """The item's platforms, its first one (written first, adapted from) first."""
        return [post.platform for post in self.posts]

    def post_for(self, platform: str) -> ItemPost | None:
        """Return the item's post for a platform, or None."""
        return next((p for p in self.posts if p.platform == platform), None)

    def to_json(self) -> dict[str, Any]:
        """Return the item as stored (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CampaignItem:
        """Return the item a stored JSON object holds."""
        posts = [ItemPost(**post) for post in data.get("posts") or []]
        return cls(**{**data, "posts": posts})


@dataclass(slots=True)
class CampaignRecord:
    """A campaign: its request, its state and its items (see the module docstring)."""

    campaign_id: str
    #: The API key that created it (only it sees the campaign, its runs and threads).
    owner: str
    #: The assistant writing the posts (a built-in one, or the owner's brand preset).
    assistant_id: str
    brief: str
    #: How many posts the plan asks for.
    posts: int
    platforms: list[str]
    #: The window as given: start, end, timezone, days, times, min_gap_minutes.
    window: dict[str, Any]
    approval: Approval
    #: `{"type": "webhook", "url"}`, `{"type": "mcp", "url", "tool", "arguments"}` or None.
    publisher: dict[str, Any] | None
    status: CampaignStatus
    created_at: str
    updated_at: str
    name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: What the last plan (or its failure) said.
    message: str | None = None
    #: The server's base URL its creator reached (absolute image links).
    base_url: str | None = None
    #: 1, then one more each time the plan is asked for again.
    plan_generation: int = 1
    plan_run_id: str | None = None
    plan_thread_id: str | None = None
    #: Topics the next plan must avoid (a new plan's predecessors).
    avoid: list[str] = field(default_factory=list)
    items: list[CampaignItem] = field(default_factory=list)
    #: Bumped by every write; a write names the version it read.
    version: int = 1

    def item(self, item_id: str) -> CampaignItem | None:
        """Return one of its items, or None."""
        return next((i for i in self.items if i.item_id == item_id), None)

    def items_json(self) -> list[dict[str, Any]]:
        """Return the items as stored (JSON)."""
        return [item.to_json() for item in self.items]

    @property
    def started(self) -> bool:
        """Whether any item has left `planned` (the plan can no longer be replaced)."""
        return any(item.status != "planned" for item in self.items)


@dataclass(slots=True)
class Publication:
    """An approved post handed to the campaign's publisher at its slot, once."""

    publication_id: str
    campaign_id: str
    item_id: str
    owner: str
    platform: str
    transport: Transport
    url: str
    #: The MCP tool to call (None: a webhook).
    tool: str | None
    #: The MCP tool's arguments: tool argument → post field.
    arguments: dict[str, str]
    #: The post as published: title, body, tags, image_urls, platform, topic.
    payload: dict[str, Any]
    #: When it is due: ISO 8601 in UTC.
    slot: str
    #: The run and thread that wrote the post (the webhook outbox files it under them).
    run_id: str
    thread_id: str
    status: PublicationStatus = "scheduled"
    attempts: int = 0
    #: When the next attempt is due (ISO 8601 in UTC).
    next_attempt_at: str | None = None
    published_at: str | None = None
    #: The id the publisher returned for the published post.
    external_id: str | None = None
    #: The start of the publisher's answer.
    answer: str | None = None
    error: str | None = None
    created_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the publication as the API shows it."""
        return {
            "publication_id": self.publication_id,
            "item_id": self.item_id,
            "platform": self.platform,
            "publisher": self.transport,
            "status": self.status,
            "attempts": self.attempts,
            "slot": self.slot,
            "next_attempt_at": self.next_attempt_at if self.status == "retrying" else None,
            "published_at": self.published_at,
            "external_id": self.external_id,
            "answer": self.answer,
            "error": self.error,
        }


#: The campaign fields stored as columns; the rest is the row's JSON document.
_COLUMNS = ("campaign_id", "owner", "status", "created_at", "updated_at", "version")


def campaign_document(campaign: CampaignRecord) -> dict[str, Any]:
    """Return what a campaign row stores as its JSON document (all but its columns)."""
    document = {
        f.name: getattr(campaign, f.name)
        for f in dataclasses.fields(campaign)
        if f.name not in _COLUMNS and f.name != "items"
    }
    document["items"] = campaign.items_json()
    return document


def campaign_from_row(row: Any, document: Mapping[str, Any]) -> CampaignRecord:
    """Return the campaign a row holds: its columns and its JSON document."""
    known = {f.name for f in dataclasses.fields(CampaignRecord)}
    fields = {key: value for key, value in document.items() if key in known}
    fields["items"] = [CampaignItem.from_json(item) for item in document.get("items") or []]
    return CampaignRecord(**fields, **{name: row[name] for name in _COLUMNS})


def publication_id(campaign_id: str, item_id: str, platform: str, generation: int) -> str:
    """Return the id of an item's post's publication: the same however often it is approved."""
    name = f"atelier-campaign:{campaign_id}:{item_id}:{platform}:{generation}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def post_status(post: ItemPost, publication: str | None) -> PostStatus:
    """Return a post's status, its publication's end included (published, or failed)."""
    if post.status != "approved" or publication is None:
        return post.status
    if publication == "published":
        return "published"
    return "failed" if publication in ("failed", "unknown") else "approved"


def publication_from_row(row: Any, due: Callable[[Any], str | None]) -> Publication:
    """Return a publication a row holds; a webhook's status is its delivery's.

    Args:
        row: A publication row joined with its webhook delivery's (`d_` columns).
        due: Turns the delivery's `next_attempt_at` into ISO 8601 text.
    """
    publication = Publication(
        publication_id=row["publication_id"],
        campaign_id=row["campaign_id"],
        item_id=row["item_id"],
        owner=row["owner"],
        platform=row["platform"],
        transport=row["transport"],
        url=row["url"],
        tool=row["tool"],
        arguments=_json(row["arguments"]),
        payload=_json(row["payload"]),
        slot=str(row["slot"]),
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        published_at=row["published_at"],
        external_id=row["external_id"],
        answer=row["answer"],
        error=row["error"],
        created_at=str(row["created_at"]),
    )
    if row["status"] == "outbox":  # handed to the outbox: its delivery says how it went
        delivered = row["d_status"]
        attempts = int(row["d_attempts"] or 0)
        publication.attempts = attempts
        publication.error = row["d_error"]
        publication.next_attempt_at = due(row["d_next_attempt_at"])
        if delivered == "success":
            publication.status = "published"
            publication.published_at = str(row["d_updated_at"])
        elif delivered == "failed":
            publication.status = "failed"
        else:
            publication.status = "retrying" if attempts else "sending"
    return publication


def _json(value: Any) -> Any:
    return loads(value) if isinstance(value, str) else value


def item_status(item: CampaignItem, publications: Mapping[str, str] | None = None) -> ItemStatus:
    """Return an item's status from its posts' (`publications`: status by platform).

    Rejected until its rewriting starts; planned while no post started; writing while
    one is (or waits to start); pending_review while one waits for a person;
    published when every post went out; failed when none can go out; approved
    otherwise (posts waiting for their slot).
    """
    known = publications or {}
    values = {post_status(post, known.get(post.platform)) for post in item.posts}
    if values <= {"planned"}:
        return "rejected" if item.status == "rejected" else "planned"
    if values & {"writing", "planned"}:
        return "writing"
    if "pending_review" in values:
        return "pending_review"
    if "approved" in values:
        return "approved"
    return "published" if values == {"published"} else "failed"


class PlanOutcome(Protocol):
    """What a planner run produced (`CampaignHooks.read_plan`)."""

    @property
    def items(self) -> Sequence[Mapping[str, Any]]:
        """Each topic: `{topic, angle, key_points, first_platform}`; empty when it failed."""
        ...

    @property
    def message(self) -> str:
        """One line for a person: what the plan is, or why it failed."""
        ...

    @property
    def complete(self) -> bool:
        """Whether it has every topic asked for."""
        ...


class PostOutcome(Protocol):
    """What a post's run produced (`CampaignHooks.read_post`)."""

    @property
    def post(self) -> dict[str, Any] | None:
        """The platform's post (title, body, tags, images, …), or None when none was written."""
        ...

    @property
    def passed(self) -> bool:
        """Whether it passed its platform's checks (and its review)."""
        ...

    @property
    def reason(self) -> str | None:
        """Why it did not pass (the failing checks, named), or None."""
        ...


class CampaignHooks(Protocol):
    """What the product tells the engine about campaigns (built by `app.composition`)."""

    @property
    def planner(self) -> str:
        """The assistant id whose runs plan a campaign."""
        ...

    def check_campaign(self, writer: Assistant, platforms: Sequence[str]) -> None:
        """Check the writing assistant and the platforms.

        Raises:
            InvalidFields: A field breaks a rule (naming the field: `assistant_id`,
                `platforms[1]`).
        """
        ...

    def plan_input(
        self,
        campaign: CampaignRecord,
        *,
        count: int,
        avoid: Sequence[str],
        writer: Assistant,
    ) -> dict[str, Any]:
        """Return the planner run's input: `count` topics, none like `avoid`, for `writer`."""
        ...

    def read_plan(self, values: Mapping[str, Any] | None) -> PlanOutcome:
        """Return what a finished planner run's values hold."""
        ...

    def write_input(
        self,
        campaign: CampaignRecord,
        item: CampaignItem,
        platform: str,
        source: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """Return the input of the run writing an item's post for a platform.

        `source` is None for the item's first platform (written from its topic),
        else the first platform's post, which the run adapts.
        """
        ...

    def read_post(self, values: Mapping[str, Any] | None, platform: str) -> PostOutcome:
        """Return the post a finished run's (or an edited thread's) values hold."""
        ...

    def publish_fields(
        self, campaign: CampaignRecord, item: CampaignItem, platform: str, post: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the post as a publisher gets it: every field of `POST_FIELDS`.

        Image URLs are absolute and load without an API key.
        """
        ...

    def topic_conflict(self, topic: str, others: Sequence[str]) -> str | None:
        """Return the topic of `others` that `topic` nearly repeats, or None."""
        ...


def campaign_json(
    campaign: CampaignRecord, items: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Return a campaign as the API shows it (`items`: its items' views, for the counts)."""
    counts: dict[str, int] = {}
    for item in items if items is not None else [{"status": i.status} for i in campaign.items]:
        counts[str(item["status"])] = counts.get(str(item["status"]), 0) + 1
    return {
        "campaign_id": campaign.campaign_id,
        "name": campaign.name,
        "assistant_id": campaign.assistant_id,
        "brief": campaign.brief,
        "posts": campaign.posts,
        "platforms": campaign.platforms,
        "window": campaign.window,
        "approval": campaign.approval,
        "publisher": campaign.publisher,
        "status": campaign.status,
        "message": campaign.message,
        "metadata": campaign.metadata,
        "plan_run_id": campaign.plan_run_id,
        "plan_thread_id": campaign.plan_thread_id,
        "items": counts,
        "created_at": campaign.created_at,
        "updated_at": campaign.updated_at,
    }


def item_json(
    hooks: CampaignHooks | None,
    campaign: CampaignRecord,
    item: CampaignItem,
    publications: Mapping[str, Publication],
) -> dict[str, Any]:
    """Return an item as the API shows it, each post as its platform (`hooks`) gets it."""
    states = {platform: p.status for platform, p in publications.items()}
    posts = []
    for post in item.posts:
        publication = publications.get(post.platform)
        shown = None
        if post.post is not None and hooks is not None:
            shown = hooks.publish_fields(campaign, item, post.platform, post.post)
        posts.append(
            {
                "platform": post.platform,
                "status": post_status(post, states.get(post.platform)),
                "thread_id": post.thread_id,
                "run_id": post.run_id,
                "post": shown,
                "error": post.error or (publication.error if publication is not None else None),
                "publication_id": publication.publication_id if publication else None,
            }
        )
    return {
        "item_id": item.item_id,
        "topic": item.topic,
        "angle": item.angle,
        "key_points": item.key_points,
        "slot": item.slot,
        "status": item_status(item, states),
        "generation": item.generation,
        "reason": item.reason,
        "posts": posts,
    }


__all__ = [
    "ACTIVE",
    "CAMPAIGN_STATUSES",
    "FINAL_PUBLICATION",
    "ITEM_STATUSES",
    "MAX_CAMPAIGNS_PER_OWNER",
    "MAX_ITEMS",
    "MAX_REWRITES",
    "POST_FIELDS",
    "PUBLICATION_STATUSES",
    "RUNS_AT_ONCE",
    "Approval",
    "CampaignHooks",
    "CampaignItem",
    "CampaignRecord",
    "CampaignStatus",
    "ItemPost",
    "ItemStatus",
    "PlanOutcome",
    "PostOutcome",
    "PostStatus",
    "Publication",
    "PublicationStatus",
    "Transport",
    "campaign_document",
    "campaign_from_row",
    "campaign_json",
    "item_json",
    "item_status",
    "post_status",
    "publication_from_row",
    "publication_id",
]
