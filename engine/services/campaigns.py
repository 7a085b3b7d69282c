"""The campaigns service: a caller's campaigns, what a person does to them, and their views.

Creating a campaign checks its request (the writing assistant and platforms by the
product's hooks, the window by `core.slots`, the publisher's URL by the outbound
rules webhooks follow) and starts its plan run; the driver
(`engine.services.campaign_driver`) does the rest between a person's actions. A
person edits the plan before anything is written (an item's topic or slot, drop
one, add one, plan again), starts the writing, approves or rejects each item's
posts, and reads the campaign, its items and its publications. Every write is made
on the campaign as read, and made again when it moved meanwhile (`_change`), so a
person's edit and a driver pass never overwrite each other. See docs/campaigns.md.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.slots import WindowError, next_free_slot, parse_window, plan_slots
from engine.campaigns import (
    MAX_CAMPAIGNS_PER_OWNER,
    MAX_ITEMS,
    MAX_REWRITES,
    POST_FIELDS,
    Approval,
    CampaignHooks,
    CampaignItem,
    CampaignRecord,
    CampaignStatus,
    ItemPost,
    Publication,
    campaign_json,
    item_json,
    item_status,
)
from engine.crons import iso, utc_now
from engine.errors import Conflict, Invalid, InvalidFields, NotFound
from engine.keys import OwnerCheck
from engine.outbound import check_outbound_url
from engine.repositories import CampaignRepository, LimitReached
from engine.services.campaign_driver import CAMPAIGN_POLL, CampaignDriver
from engine.services.core import EngineCore
from engine.services.runs import RunsService

#: An MCP tool's name, and a tool argument's.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
#: Times a write is made again on a campaign that moved meanwhile.
WRITE_TRIES = 8


def check_window(window: Mapping[str, Any], posts: int, platforms: Sequence[str]) -> None:
    """Check a window and that it holds `posts` posts on `platforms` with its gap.

    Raises:
        InvalidFields: A field of the window breaks a rule, or it is too small (`window`).
    """
    try:
        parsed = parse_window(window)
        plan_slots(parsed, [list(platforms)] * posts, _seeded(0))
    except WindowError as exc:
        raise InvalidFields.at(exc.field, exc.rule) from None


def _seeded(seed: int) -> random.Random:
    return random.Random(seed)


def check_publisher(publisher: Mapping[str, Any] | None, rules: Any) -> dict[str, Any] | None:
    """Return a publisher once its fields pass the rules (None: nothing is published).

    Raises:
        InvalidFields: Its type, URL (the outbound rules), tool or argument mapping.
    """
    if publisher is None:
        return None
    kind = publisher.get("type")
    url = check_outbound_url(publisher.get("url"), rules, field_name="publisher.url")
    if url is None:
        raise InvalidFields.at("publisher.url", "publisher.url is required")
    if kind == "webhook":
        return {"type": "webhook", "url": url}
    if kind != "mcp":
        raise InvalidFields.at("publisher.type", "publisher.type is webhook or mcp")
    tool = publisher.get("tool")
    if not isinstance(tool, str) or not TOOL_NAME.match(tool):
        raise InvalidFields.at("publisher.tool", "publisher.tool is an MCP tool's name")
    mapping = publisher.get("arguments")
    if mapping is None:
        mapping = {name: name for name in POST_FIELDS}
    if not isinstance(mapping, Mapping) or not mapping:
        raise InvalidFields.at(
            "publisher.arguments", "publisher.arguments maps tool arguments to post fields"
        )
    for argument, source in mapping.items():
        if not isinstance(argument, str) or not TOOL_NAME.match(argument):
            raise InvalidFields.at("publisher.arguments", "an argument name is 1-128 letters")
        if source not in POST_FIELDS:
            raise InvalidFields.at(
                f"publisher.arguments.{argument}",
                f"a post field: one of {', '.join(POST_FIELDS)}",
            )
    return {"type": "mcp", "url": url, "tool": tool, "arguments": dict(mapping)}


async def insert_bounded(campaigns: CampaignRepository, campaign: CampaignRecord) -> None:
    """Store a new campaign within its owner's bound (`MAX_CAMPAIGNS_PER_OWNER`).

    Raises:
        Conflict: The owner keeps as many campaigns as it may (nothing is written).
    """
    try:
        await campaigns.insert(campaign, limit=MAX_CAMPAIGNS_PER_OWNER)
    except LimitReached as exc:
        raise Conflict(f"{exc}; delete one first", field="campaigns") from None


class CampaignsService:
    """Campaigns, each owned by one API key, and their driver."""

    def __init__(
        self,
        core: EngineCore,
        campaigns: CampaignRepository,
        runs: RunsService,
        hooks: CampaignHooks | None,
        *,
        clock: Callable[[], datetime] = utc_now,
        interval: float = CAMPAIGN_POLL,
        owners: OwnerCheck | None = None,
    ) -> None:
        """Serve campaigns from `campaigns` (`hooks` None: none runs; `owners`: the driver's)."""
        self._core = core
        self._campaigns = campaigns
        self.hooks = hooks
        #: Drives the campaigns and publishes their posts while started.
        self.driver = CampaignDriver(core, campaigns, runs, hooks, clock, interval, owners)

    @property
    def clock(self) -> Callable[[], datetime]:
        """The campaigns' clock: slots fall due by it (tests move it on)."""
        return self.driver.scheduler.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self.driver.scheduler.clock = clock

    def start_driver(self) -> None:
        """Start driving and publishing in a task of this loop."""
        self.driver.start()

    async def stop_driver(self) -> None:
        """Stop driving and publishing."""
        await self.driver.stop()

    def _hooks(self) -> CampaignHooks:
        if self.hooks is None or self.hooks.planner not in self._core.builtins:
            raise Invalid("this server plans no campaigns (no campaign planner is served)")
        return self.hooks

    # -- create, read, delete ---------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        assistant_id: str,
        brief: str,
        posts: int,
        platforms: list[str],
        window: dict[str, Any],
        approval: Approval,
        publisher: dict[str, Any] | None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        base_url: str | None = None,
    ) -> CampaignRecord:
        """Store a campaign and start its plan run; return it.

        Raises:
            RunsError: NotFound (assistant), Invalid (a field, naming it).
        """
        hooks = self._hooks()
        writer = await self._core.resolve(owner, assistant_id)
        hooks.check_campaign(writer, platforms)
        check_window(window, posts, platforms)
        checked = check_publisher(publisher, self._core.setup.webhooks.rules)
        stamp = iso(self.clock()) or ""
        campaign = CampaignRecord(
            campaign_id=str(uuid.uuid4()),
            owner=owner,
            assistant_id=writer.assistant_id,
            brief=brief,
            posts=posts,
            platforms=list(platforms),
            window=dict(window),
            approval=approval,
            publisher=checked,
            status="planning",
            created_at=stamp,
            updated_at=stamp,
            name=name,
            metadata=metadata or {},
            base_url=base_url,
        )
        await insert_bounded(self._campaigns, campaign)
        return await self._replan(owner, campaign.campaign_id)

    async def get(self, owner: str, campaign_id: str) -> CampaignRecord:
        """Return the owner's campaign; raise NotFound (also when another owner has it)."""
        campaign = await self._campaigns.get(owner, campaign_id)
        if campaign is None:
            raise NotFound(f"campaign {campaign_id!r} not found")
        return campaign

    async def search(
        self, owner: str, *, status: CampaignStatus | None = None, limit: int = 10, offset: int = 0
    ) -> list[CampaignRecord]:
        """Return the owner's campaigns (of one status), newest first."""
        return await self._campaigns.search(owner, status=status, limit=limit, offset=offset)

    async def delete(self, owner: str, campaign_id: str) -> None:
        """Delete a campaign and its publications (its threads and runs stay)."""
        if not await self._campaigns.delete(owner, campaign_id):
            raise NotFound(f"campaign {campaign_id!r} not found")

    async def update(
        self, owner: str, campaign_id: str, changes: Mapping[str, Any]
    ) -> CampaignRecord:
        """Change a campaign's name, metadata, approval mode or publisher.

        A new publisher applies to the posts approved after the change.
        """
        publisher = changes.get("publisher")
        rules = self._core.setup.webhooks.rules
        checked = check_publisher(publisher, rules) if publisher is not None else None

        def apply(campaign: CampaignRecord) -> None:
            for name in ("name", "metadata", "approval"):
                if name in changes:
                    setattr(campaign, name, changes[name])
            if "publisher" in changes:
                campaign.publisher = checked

        return await self._change(owner, campaign_id, apply)

    # -- the plan ---------------------------------------------------------------------------

    async def plan_again(self, owner: str, campaign_id: str) -> CampaignRecord:
        """Ask the planner for a new plan (its topics avoid the current ones).

        Raises:
            Conflict: An item is written already, or a plan is being made.
        """
        self._hooks()

        def apply(campaign: CampaignRecord) -> None:
            if campaign.status == "planning":
                raise Conflict("the campaign is being planned; wait for its plan")
            if campaign.started:
                raise Conflict("items are written already: edit them one by one instead")
            campaign.avoid = [*campaign.avoid, *(i.topic for i in campaign.items)][-200:]
            campaign.items = []
            campaign.plan_generation += 1
            campaign.plan_run_id = campaign.plan_thread_id = None
            campaign.status, campaign.message = "planning", None

        await self._change(owner, campaign_id, apply)
        return await self._replan(owner, campaign_id)

    async def _replan(self, owner: str, campaign_id: str) -> CampaignRecord:
        """Start the plan run of a campaign left without one (the driver would, a pass later)."""
        for _ in range(WRITE_TRIES):
            campaign = await self.get(owner, campaign_id)
            if campaign.status != "planning" or campaign.plan_run_id is not None:
                return campaign
            version = campaign.version
            await self.driver.start_plan(campaign)
            if await self._campaigns.replace(campaign, version=version):
                return campaign
        return await self.get(owner, campaign_id)

    async def start(self, owner: str, campaign_id: str) -> CampaignRecord:
        """Start writing a planned campaign (`approval: auto` ones start by themselves)."""

        def apply(campaign: CampaignRecord) -> None:
            if campaign.status != "planned":
                raise Conflict(f"the campaign is {campaign.status}; only a planned one starts")
            if not campaign.items:
                raise Conflict("the plan has no items: add one or plan again")
            campaign.status = "running"

        return await self._change(owner, campaign_id, apply)

    async def add_item(
        self,
        owner: str,
        campaign_id: str,
        *,
        topic: str,
        angle: str = "",
        key_points: Sequence[str] = (),
        first_platform: str | None = None,
        slot: datetime | None = None,
    ) -> tuple[CampaignRecord, CampaignItem]:
        """Add an item to the plan (before the campaign completes); return it."""
        hooks = self._hooks()
        added: list[CampaignItem] = []

        def apply(campaign: CampaignRecord) -> None:
            if campaign.status not in ("planned", "running"):
                raise Conflict(f"the campaign is {campaign.status}; items are added to a plan")
            if len(campaign.items) >= MAX_ITEMS:
                raise Conflict(f"a campaign has at most {MAX_ITEMS} items")
            self._check_topic(hooks, campaign, topic, None)
            first = first_platform or campaign.platforms[0]
            if first not in campaign.platforms:
                raise InvalidFields.at("first_platform", "first_platform is one of the platforms")
            item = CampaignItem(
                item_id=str(uuid.uuid4()),
                topic=topic,
                angle=angle,
                key_points=list(key_points),
                slot="",
                posts=[
                    ItemPost(platform=p)
                    for p in [first, *(p for p in campaign.platforms if p != first)]
                ],
            )
            item.slot = self._check_slot(campaign, item, slot)
            campaign.items.append(item)
            campaign.items.sort(key=lambda i: i.slot)
            added[:] = [item]

        campaign = await self._change(owner, campaign_id, apply)
        return campaign, added[0]

    async def edit_item(
        self, owner: str, campaign_id: str, item_id: str, changes: Mapping[str, Any]
    ) -> tuple[CampaignRecord, CampaignItem]:
        """Change a planned item's topic, angle, key points or slot (before it is written)."""
        hooks = self._hooks()

        def apply(campaign: CampaignRecord) -> None:
            item = self._planned_item(campaign, item_id)
            if "topic" in changes:
                self._check_topic(hooks, campaign, changes["topic"], item_id)
                item.topic = changes["topic"]
            for name in ("angle", "key_points"):
                if name in changes:
                    setattr(item, name, changes[name])
            if changes.get("slot") is not None:
                item.slot = self._check_slot(campaign, item, changes["slot"])
                campaign.items.sort(key=lambda i: i.slot)

        campaign = await self._change(owner, campaign_id, apply)
        return campaign, self._item(campaign, item_id)

    async def drop_item(self, owner: str, campaign_id: str, item_id: str) -> CampaignRecord:
        """Drop a planned item (before it is written)."""

        def apply(campaign: CampaignRecord) -> None:
            item = self._planned_item(campaign, item_id)
            campaign.items.remove(item)

        return await self._change(owner, campaign_id, apply)

    # -- review -------------------------------------------------------------------------------

    async def approve(self, owner: str, campaign_id: str, item_id: str) -> CampaignRecord:
        """Approve an item's posts waiting for review: each is published at its slot."""
        now = self.clock()
        made: list[Publication] = []

        async def approve(campaign: CampaignRecord) -> list[Publication]:
            item = self._item(campaign, item_id)
            if item_status(item) != "pending_review":
                raise Conflict(
                    f"item {item_id!r} is {item_status(item)}; only a post waiting for "
                    "review (pending_review) is approved"
                )
            made[:] = await self.driver.approve(campaign, item, now, person=True)
            item.status = item_status(item)
            return made

        return await self._change_async(owner, campaign_id, approve)

    async def reject(
        self, owner: str, campaign_id: str, item_id: str, reason: str
    ) -> CampaignRecord:
        """Send an item back: it is written again, the reason in the writer's request."""

        def apply(campaign: CampaignRecord) -> None:
            item = self._item(campaign, item_id)
            statuses = {post.status for post in item.posts}
            if statuses & {"writing", "planned"} or statuses & {"approved", "published"}:
                raise Conflict(
                    f"item {item_id!r} is {item_status(item)}; only a written item that is "
                    "not approved (pending_review or failed) is rejected"
                )
            if item.generation > MAX_REWRITES:
                raise Conflict(f"item {item_id!r} was written {item.generation} times already")
            item.generation += 1
            item.reason = reason
            item.posts = [ItemPost(platform=post.platform) for post in item.posts]
            item.status = "rejected"
            if campaign.status == "completed":
                campaign.status = "running"

        return await self._change(owner, campaign_id, apply)

    # -- views ----------------------------------------------------------------------------------

    async def publications(self, owner: str, campaign_id: str) -> list[Publication]:
        """Return a campaign's publications by slot; raise NotFound."""
        await self.get(owner, campaign_id)
        return await self._campaigns.publications(owner, campaign_id)

    def campaign_json(self, campaign: CampaignRecord) -> dict[str, Any]:
        """Return a campaign as the API shows it (without its publications' ends)."""
        return campaign_json(campaign)

    async def view(self, owner: str, campaign_id: str) -> dict[str, Any]:
        """Return a campaign with its items and publications, as the API shows them."""
        campaign = await self.get(owner, campaign_id)
        publications = await self._campaigns.publications(owner, campaign_id)
        states: dict[str, dict[str, Publication]] = {}
        for publication in publications:
            states.setdefault(publication.item_id, {})[publication.platform] = publication
        items = [
            item_json(self.hooks, campaign, item, states.get(item.item_id, {}))
            for item in campaign.items
        ]
        return {
            "campaign": campaign_json(campaign, items),
            "items": items,
            "publications": [p.to_json() for p in publications],
        }

    # -- helpers ------------------------------------------------------------------------------

    def _item(self, campaign: CampaignRecord, item_id: str) -> CampaignItem:
        item = campaign.item(item_id)
        if item is None:
            raise NotFound(f"item {item_id!r} not found in campaign {campaign.campaign_id!r}")
        return item

    def _planned_item(self, campaign: CampaignRecord, item_id: str) -> CampaignItem:
        item = self._item(campaign, item_id)
        if item.status != "planned" or any(p.status != "planned" for p in item.posts):
            raise Conflict(f"item {item_id!r} is {item.status}; only a planned item changes")
        return item

    def _check_topic(
        self, hooks: CampaignHooks, campaign: CampaignRecord, topic: str, item_id: str | None
    ) -> None:
        """Refuse a topic that nearly repeats another item's (its topic, or topic and angle)."""
        others = [i for i in campaign.items if i.item_id != item_id]
        repeated = hooks.topic_conflict(topic, [i.topic for i in others])
        if repeated is None:
            repeated = hooks.topic_conflict(topic, [f"{i.topic} {i.angle}" for i in others])
        if repeated is not None:
            raise InvalidFields.at("topic", f"topic nearly repeats another item's: {repeated}")

    def _check_slot(
        self, campaign: CampaignRecord, item: CampaignItem, slot: datetime | None
    ) -> str:
        """Return an item's slot: the one given once it passes the window's rules, or a free one."""
        window = parse_window(campaign.window)
        others = [i for i in campaign.items if i.item_id != item.item_id]
        taken = [{"at": i.slot, "platform": p} for i in others if i.slot for p in i.platforms]
        if slot is None:
            found = next_free_slot(
                max(window.start, self.clock()), item.platforms, window, _seeded(0), taken
            )
            if found is None:
                raise InvalidFields.at("slot", "the window has no free slot left for it")
            return iso(found) or ""
        if slot.tzinfo is None:
            slot = slot.replace(tzinfo=window.zone)
        if not window.start <= slot <= window.end:
            raise InvalidFields.at("slot", "slot must lie inside the campaign's window")
        for other in others:
            shared = set(other.platforms) & set(item.platforms)
            at = datetime.fromisoformat(other.slot) if other.slot else None
            if shared and at is not None and abs(at - slot) < window.min_gap:
                raise InvalidFields.at(
                    "slot",
                    f"slot is closer than window.min_gap_minutes to item {other.item_id!r} "
                    f"on {sorted(shared)[0]}",
                )
        return iso(slot) or ""

    async def _change(
        self, owner: str, campaign_id: str, apply: Callable[[CampaignRecord], Any]
    ) -> CampaignRecord:
        async def wrapped(campaign: CampaignRecord) -> list[Publication]:
            apply(campaign)
            return []

        return await self._change_async(owner, campaign_id, wrapped)

    async def _change_async(
        self,
        owner: str,
        campaign_id: str,
        apply: Callable[[CampaignRecord], Awaitable[list[Publication]]],
    ) -> CampaignRecord:
        """Apply a change to the campaign as read and write it; again when it moved meanwhile."""
        for _ in range(WRITE_TRIES):
            campaign = await self.get(owner, campaign_id)
            version = campaign.version
            publications = await apply(campaign)
            campaign.updated_at = iso(self.clock()) or ""
            if await self._campaigns.replace(campaign, version=version, publications=publications):
                return campaign
        raise Conflict("the campaign kept changing; try again")


__all__ = ["CampaignsService", "check_publisher", "check_window"]
