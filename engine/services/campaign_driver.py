"""The campaigns' driver and publisher: what moves a campaign on between a person's actions.

Every process whose CRON_SCHEDULER is on runs one `CampaignDriver` pass a second
(`engine.crons.CronScheduler` with the campaigns' clock, which tests replace):

* **drive** — each active campaign is claimed (`CampaignRepository.claim_next`: one
  process at a time, `FOR UPDATE SKIP LOCKED` in scale-out) and moved on: its plan
  run's result becomes its items, each with a slot (`core.slots.plan_slots`); an
  item's first platform is written, then adapted for the others, at most
  `RUNS_AT_ONCE` runs of a campaign at once; a finished run's post waits for a
  person (`pending_review`) or, with `approval: auto`, is approved at once; a
  person's edit of a post (a run on its thread) is read back. Every run is an
  ordinary run of the engine (traced, costed, resumable), started through the runs
  service from the one `RunSpec` this adapter builds (`campaign_spec`) with an
  idempotency key, so a pass that dies after starting a run finds it again.
* **publish** — due webhook publications are queued in the outbox; due MCP calls
  are leased, made (`engine.publishing.call_tool`) and recorded, retried with the
  webhooks' backoff (`engine.webhooks.retry_delay`) up to WEBHOOK_MAX_ATTEMPTS; a
  call whose sender died mid-call becomes `unknown`.

A campaign whose owner may no longer act (its key revoked or expired,
`engine.keys.OwnerCheck`) is left as it is: nothing is planned, written, approved or
published for it; its data stays.

What the runs ask and what their results mean is the product's (`CampaignHooks`).
See docs/campaigns.md.
"""

from __future__ import annotations

import hashlib
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.slots import Occupied, WindowError, next_free_slot, plan_slots
from engine.campaigns import (
    RUNS_AT_ONCE,
    CampaignHooks,
    CampaignItem,
    CampaignRecord,
    ItemPost,
    Publication,
    item_status,
    publication_id,
)
from engine.crons import CronScheduler, iso, parse_time, utc_now
from engine.errors import Conflict, RunsError
from engine.keys import OwnerCheck
from engine.records import RunRecord
from engine.repositories import CampaignClaim, CampaignRepository
from engine.serde import dumps
from engine.services.campaign_publisher import CampaignPublisher
from engine.services.core import EngineCore
from engine.services.runs import RunsService
from engine.spec import RunSpec

log = logging.getLogger(__name__)

#: Seconds between two passes.
CAMPAIGN_POLL = 1.0
#: Campaigns one pass drives at most (the rest wait for the next pass).
CAMPAIGNS_PER_PASS = 200


def campaign_spec(
    campaign: CampaignRecord,
    *,
    assistant_id: str,
    graph_input: dict[str, Any],
    key: str,
    metadata: Mapping[str, Any],
) -> RunSpec:
    """Return the run request of a campaign's plan or post (checked like any adapter's)."""
    return RunSpec(
        assistant_id=assistant_id,
        owner=campaign.owner,
        thread_id=None,
        input=graph_input,
        stream_mode=("values", "custom"),
        on_disconnect="continue",
        metadata={**metadata, "campaign_id": campaign.campaign_id},
        multitask_strategy="reject",
        if_not_exists="create",
        idempotency_key=key,
        base_url=campaign.base_url,
    )


def _digest(value: Any) -> str:
    return hashlib.sha256(dumps(value).encode()).hexdigest()[:16]


def _rng(*parts: Any) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


def run_failure(run: RunRecord | None) -> str:
    """Return why a run that did not succeed wrote nothing."""
    if run is None:
        return "its run is gone"
    message = str((run.error or {}).get("message") or "")
    return f"its run ended {run.status}" + (f": {message}" if message else "")


class CampaignDriver:
    """Drives the active campaigns and publishes their due posts (see the module docstring)."""

    def __init__(
        self,
        core: EngineCore,
        campaigns: CampaignRepository,
        runs: RunsService,
        hooks: CampaignHooks | None,
        clock: Callable[[], datetime] = utc_now,
        interval: float = CAMPAIGN_POLL,
        owners: OwnerCheck | None = None,
    ) -> None:
        """Drive `campaigns` through `runs`, as `hooks` say, on `clock`'s time.

        `owners` says whether a campaign's owner may still act (None: every owner may).
        """
        self._core = core
        self._campaigns = campaigns
        self._runs = runs
        self.hooks = hooks
        self._owners = owners
        self.scheduler = CronScheduler(self.run_pass, clock=clock, interval=interval)
        #: Hands the due publications over (every pass, after the campaigns moved on).
        self.publisher = CampaignPublisher(core, campaigns, owners)

    # -- runs -----------------------------------------------------------------------------

    async def start_run(
        self,
        campaign: CampaignRecord,
        assistant_id: str,
        graph_input: dict[str, Any],
        name: str,
        metadata: Mapping[str, Any],
    ) -> RunRecord:
        """Start (or find again) a campaign's run; its key names what it is and asks.

        Raises:
            RunsError: The run request is refused (its assistant is gone, …).
        """
        key = f"campaign:{campaign.campaign_id}:{name}:{_digest(graph_input)}"
        spec = campaign_spec(
            campaign,
            assistant_id=assistant_id,
            graph_input=graph_input,
            key=key,
            metadata=metadata,
        )
        run, _created = await self._runs.create(spec)
        return run

    async def start_plan(self, campaign: CampaignRecord) -> None:
        """Start the campaign's plan run for its current plan generation (in place)."""
        hooks = self.hooks
        assert hooks is not None
        writer = await self._core.resolve(campaign.owner, campaign.assistant_id)
        graph_input = hooks.plan_input(
            campaign, count=campaign.posts, avoid=campaign.avoid, writer=writer
        )
        run = await self.start_run(
            campaign,
            hooks.planner,
            graph_input,
            f"plan:{campaign.plan_generation}",
            {"campaign_plan": campaign.plan_generation},
        )
        campaign.plan_run_id, campaign.plan_thread_id = run.run_id, run.thread_id

    async def _values(self, owner: str, thread_id: str | None) -> dict[str, Any] | None:
        if thread_id is None:
            return None
        thread = await self._core.threads.get(owner, thread_id)
        return thread.values if thread is not None else None

    # -- the pass ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the passes in a task of this loop."""
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop the passes (one in progress is cancelled; its transaction rolls back)."""
        await self.scheduler.stop()

    async def run_pass(self, now: datetime) -> int:
        """Drive every active campaign, then publish what is due; return how much moved."""
        if self.hooks is None or self._core.closing:
            return 0
        moved = 0
        after = ""
        for _ in range(CAMPAIGNS_PER_PASS):
            async with self._campaigns.claim_next(after) as claim:
                if claim is None:
                    break
                after = claim.campaign.campaign_id
                if self._owners is not None and not await self._owners.active(claim.campaign.owner):
                    continue  # its key was revoked or expired: the campaign stays as it is
                try:
                    moved += await self._drive(claim, now)
                except RunsError as exc:  # a refused run request: the campaign waits
                    log.warning("campaign %s: %s", after, exc.message)
        return moved + await self.publisher.publish_due(now)

    async def _drive(self, claim: CampaignClaim, now: datetime) -> int:
        campaign = claim.campaign
        publications: list[Publication] = []
        if campaign.status == "planning":
            changed = await self._planning(campaign, now)
        else:
            changed = await self._running(campaign, now, publications)
        if not changed:
            return 0
        campaign.updated_at = iso(now) or ""
        return 1 if await claim.save(campaign, publications) else 0

    # -- planning -----------------------------------------------------------------------------

    async def _planning(self, campaign: CampaignRecord, now: datetime) -> bool:
        hooks = self.hooks
        assert hooks is not None
        if campaign.plan_run_id is None:
            await self.start_plan(campaign)
            return True
        run = await self._core.runs.get(campaign.plan_run_id)
        if run is not None and run.active:
            return False
        if run is None or run.status != "success":
            campaign.status, campaign.message = "failed", f"The plan failed: {run_failure(run)}."
            return True
        outcome = hooks.read_plan(await self._values(campaign.owner, campaign.plan_thread_id))
        if not outcome.items:
            campaign.status, campaign.message = "failed", outcome.message
            return True
        items = [self._new_item(campaign, topic) for topic in outcome.items]
        try:
            slots = plan_slots(
                campaign.window,
                [item.platforms for item in items],
                _rng(campaign.campaign_id, campaign.plan_generation),
            )
        except WindowError as exc:
            campaign.status, campaign.message = "failed", str(exc)
            return True
        for item, slot in zip(items, slots, strict=True):
            item.slot = iso(slot) or ""
        campaign.items = items
        campaign.message = outcome.message
        campaign.status = "running" if campaign.approval == "auto" else "planned"
        return True

    def _new_item(self, campaign: CampaignRecord, topic: Mapping[str, Any]) -> CampaignItem:
        first = str(topic.get("first_platform") or campaign.platforms[0])
        order = [first, *(p for p in campaign.platforms if p != first)]
        return CampaignItem(
            item_id=str(uuid.uuid4()),
            topic=str(topic.get("topic") or ""),
            angle=str(topic.get("angle") or ""),
            key_points=[str(p) for p in topic.get("key_points") or []],
            slot="",
            posts=[ItemPost(platform=p) for p in order],
        )

    # -- running ------------------------------------------------------------------------------

    async def _running(
        self, campaign: CampaignRecord, now: datetime, publications: list[Publication]
    ) -> bool:
        in_flight = sum(p.status == "writing" for i in campaign.items for p in i.posts)
        changed = False
        for item in campaign.items:
            before = (item.status, [(p.status, p.run_id, p.post) for p in item.posts])
            in_flight = await self._write(campaign, item, in_flight)
            await self._read_edits(campaign, item)
            item.status = item_status(item)
            if campaign.approval == "auto" and item.status == "pending_review":
                publications += await self.approve(campaign, item, now, person=False)
                item.status = item_status(item)
            changed |= before != (item.status, [(p.status, p.run_id, p.post) for p in item.posts])
        if await self._finished(campaign, publications):
            campaign.status = "completed"
            changed = True
        return changed

    async def _write(self, campaign: CampaignRecord, item: CampaignItem, in_flight: int) -> int:
        """Read the item's finished runs and start the runs it may start; return runs in flight."""
        hooks = self.hooks
        assert hooks is not None
        for post in item.posts:
            if post.status != "writing" or post.run_id is None:
                continue
            run = await self._core.runs.get(post.run_id)
            if run is not None and run.active:
                continue
            in_flight -= 1
            if run is None or run.status != "success":
                post.status, post.error = "failed", f"The post was not written: {run_failure(run)}."
                continue
            outcome = hooks.read_post(
                await self._values(campaign.owner, post.thread_id), post.platform
            )
            post.post = outcome.post
            post.status = "pending_review" if outcome.passed else "failed"
            post.error = None if outcome.passed else outcome.reason
        first = item.posts[0]
        for post in item.posts:
            if post.status != "planned" or in_flight >= RUNS_AT_ONCE:
                continue
            if post is not first and first.status == "failed":
                post.status = "failed"
                post.error = f"Not written: the {first.platform} post it adapts failed."
                continue
            if post is not first and first.status not in ("pending_review", "approved"):
                continue
            source = first.post if post is not first else None
            graph_input = hooks.write_input(campaign, item, post.platform, source)
            run = await self.start_run(
                campaign,
                campaign.assistant_id,
                graph_input,
                f"{item.item_id}:{item.generation}:{post.platform}",
                {"campaign_item": item.item_id, "platform": post.platform},
            )
            post.status, post.run_id, post.thread_id = "writing", run.run_id, run.thread_id
            post.post, post.error = None, None
            in_flight += 1
        return in_flight

    async def _read_edits(self, campaign: CampaignRecord, item: CampaignItem) -> None:
        """Read back a post a person revised on its thread (an edit, a redrawn card)."""
        hooks = self.hooks
        assert hooks is not None
        for post in item.posts:
            if post.status != "pending_review" or post.thread_id is None:
                continue
            runs = await self._core.runs.for_thread(post.thread_id, limit=1)
            latest = runs[0] if runs else None
            if latest is None or latest.run_id == post.run_id or latest.active:
                continue
            if latest.status != "success":
                continue
            outcome = hooks.read_post(
                await self._values(campaign.owner, post.thread_id), post.platform
            )
            post.run_id, post.post = latest.run_id, outcome.post
            post.error = None if outcome.passed else outcome.reason

    async def _finished(self, campaign: CampaignRecord, new: Sequence[Publication]) -> bool:
        """Whether every item ended: published, failed, or approved with no publisher."""
        if new or any(
            i.status in ("planned", "writing", "pending_review", "rejected") for i in campaign.items
        ):
            return False
        if campaign.publisher is None:
            return True
        states: dict[str, dict[str, str]] = {}
        for publication in await self._campaigns.publications(campaign.owner, campaign.campaign_id):
            states.setdefault(publication.item_id, {})[publication.platform] = publication.status
        return all(
            item_status(item, states.get(item.item_id)) in ("published", "failed")
            for item in campaign.items
        )

    # -- approval ---------------------------------------------------------------------------

    async def approve(
        self, campaign: CampaignRecord, item: CampaignItem, now: datetime, *, person: bool
    ) -> list[Publication]:
        """Approve the item's posts waiting for review; return their publications.

        Each post is read from its thread as it is now (a person's edits included).
        A post approved after its slot goes out at the next free slot of its platform.

        Raises:
            Conflict: A person approves while a run revises one of the posts.
        """
        hooks = self.hooks
        assert hooks is not None
        made: list[Publication] = []
        taken = await self._taken(campaign, item)
        for post in item.posts:
            if post.status != "pending_review" or post.thread_id is None:
                continue
            if await self._core.runs.active(post.thread_id):
                if person:
                    raise Conflict(
                        f"the {post.platform} post is being revised (a run on thread "
                        f"{post.thread_id!r}); approve once it ended"
                    )
                continue
            outcome = hooks.read_post(
                await self._values(campaign.owner, post.thread_id), post.platform
            )
            if outcome.post is None:
                continue
            post.status, post.post = "approved", outcome.post
            if campaign.publisher is None or post.run_id is None:
                continue
            slot = self._slot(campaign, item, post.platform, now, taken)
            taken.append(Occupied(slot, post.platform))
            made.append(self._publication(campaign, item, post, slot, now))
        return made

    async def _taken(self, campaign: CampaignRecord, item: CampaignItem) -> list[Occupied]:
        """Return the slots taken on the campaign's platforms by its other items' posts."""
        taken = [
            Occupied(at, platform)
            for other in campaign.items
            if other.item_id != item.item_id and (at := parse_time(other.slot)) is not None
            for platform in other.platforms
        ]
        for publication in await self._campaigns.publications(campaign.owner, campaign.campaign_id):
            at = parse_time(publication.slot)
            if at is not None:
                taken.append(Occupied(at, publication.platform))
        return taken

    def _slot(
        self,
        campaign: CampaignRecord,
        item: CampaignItem,
        platform: str,
        now: datetime,
        taken: list[Occupied],
    ) -> datetime:
        planned = parse_time(item.slot)
        if planned is not None and planned >= now:
            return planned
        rng = _rng(campaign.campaign_id, item.item_id, item.generation, platform)
        try:
            late = next_free_slot(now, [platform], campaign.window, rng, taken)
        except WindowError:
            late = None
        return late or now

    def _publication(
        self,
        campaign: CampaignRecord,
        item: CampaignItem,
        post: ItemPost,
        slot: datetime,
        now: datetime,
    ) -> Publication:
        hooks = self.hooks
        publisher = campaign.publisher
        assert hooks is not None and publisher is not None and post.post is not None
        assert post.run_id is not None and post.thread_id is not None
        mcp = publisher.get("type") == "mcp"
        return Publication(
            publication_id=publication_id(
                campaign.campaign_id, item.item_id, post.platform, item.generation
            ),
            campaign_id=campaign.campaign_id,
            item_id=item.item_id,
            owner=campaign.owner,
            platform=post.platform,
            transport="mcp" if mcp else "webhook",
            url=str(publisher.get("url") or ""),
            tool=str(publisher.get("tool")) if mcp else None,
            arguments=dict(publisher.get("arguments") or {}) if mcp else {},
            payload=hooks.publish_fields(campaign, item, post.platform, post.post),
            slot=iso(slot) or "",
            run_id=post.run_id,
            thread_id=post.thread_id,
            created_at=iso(now) or "",
        )


__all__ = ["CAMPAIGN_POLL", "CampaignDriver", "campaign_spec", "run_failure"]
