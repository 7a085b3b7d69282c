"""The campaigns' publisher: each approved post handed to its publisher at its slot, once.

Every pass of the campaigns' driver (`engine.services.campaign_driver`) ends with
`CampaignPublisher.publish_due`: the due webhook publications are queued in the
webhook outbox (`CampaignRepository.hand_to_outbox`, each once; the outbox's
deliverer signs, sends and retries them), and the due MCP calls are leased to this
process (`claim_calls`: committed as `sending`, one more attempt, before the call),
made (`engine.publishing.call_tool`) and recorded — `published` with the external id
the publisher answered, `retrying` with the webhooks' backoff
(`engine.webhooks.retry_delay`, WEBHOOK_BACKOFF_SECONDS) until WEBHOOK_MAX_ATTEMPTS
attempts, or `failed`. A call whose sender died mid-call is `unknown`
(`expire_calls`), never made again. The publications of an owner that may no
longer act (a revoked or expired key, `engine.keys.OwnerCheck`) are neither queued
nor called: they stay as they are. See docs/campaigns.md.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime, timedelta

from engine.campaigns import Publication
from engine.crons import iso
from engine.keys import OwnerCheck
from engine.publishing import call_tool
from engine.repositories import CampaignRepository
from engine.services.core import EngineCore
from engine.webhooks import retry_delay

log = logging.getLogger(__name__)

#: MCP calls one pass makes at most, at once.
CALLS_PER_PASS = 8
#: Seconds a claimed call is held (longer than a call may take).
CALL_LEASE_SECONDS = 120.0
#: Owners of due publications one pass looks at (whether their keys may still act).
OWNERS_PER_PASS = 1000


class CampaignPublisher:
    """Hands due publications to their publishers (see the module docstring)."""

    def __init__(
        self, core: EngineCore, campaigns: CampaignRepository, owners: OwnerCheck | None = None
    ) -> None:
        """Publish from `campaigns` with the deployment's outbound rules and retry settings.

        `owners` says whether an owner's publications may still go out (None: every
        owner's may).
        """
        self._core = core
        self._campaigns = campaigns
        self._owners = owners
        #: Names this process's leases on the calls it makes.
        self.worker = f"publisher-{uuid.uuid4().hex[:12]}"

    async def publish_due(self, now: datetime) -> int:
        """Hand the due webhooks to the outbox and make the due MCP calls; return how many."""
        campaigns = self._campaigns
        await campaigns.expire_calls()
        at = iso(now) or ""
        skip = await self.stopped_owners(at)
        handed = await campaigns.hand_to_outbox(at, skip)
        calls = await campaigns.claim_calls(
            at, self.worker, CALL_LEASE_SECONDS, CALLS_PER_PASS, skip
        )
        await asyncio.gather(*(self._call(publication, now) for publication in calls))
        return handed + len(calls)

    async def stopped_owners(self, at: str) -> set[str]:
        """Return the owners of due publications whose keys may no longer act."""
        if self._owners is None:
            return set()
        owners = await self._campaigns.due_owners(at, OWNERS_PER_PASS)
        return {owner for owner in owners if not await self._owners.active(owner)}

    async def _call(self, publication: Publication, now: datetime) -> None:
        config = self._core.setup.webhooks
        outcome = await call_tool(
            publication,
            config.rules,
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
        )
        if outcome.ok:
            status, due = "published", None
        elif outcome.final or publication.attempts >= config.max_attempts:
            status, due = "failed", None
        else:
            status = "retrying"
            due = iso(now + timedelta(seconds=retry_delay(publication.attempts, config.backoff)))
        log.info(
            "publication %s (%s) attempt %d: %s%s",
            publication.publication_id,
            publication.platform,
            publication.attempts,
            status,
            f" ({outcome.error})" if outcome.error else "",
        )
        try:
            held = await self._campaigns.record_call(
                publication,
                worker=self.worker,
                status=status,
                error=outcome.error,
                external_id=outcome.external_id,
                answer=outcome.answer,
                published_at=iso(now) if outcome.ok else None,
                next_attempt_at=due,
            )
        except Exception:  # the database is away: the lease runs out, the call is in doubt
            log.exception("publication %s: could not record its call", publication.publication_id)
            return
        if not held:
            log.warning(
                "publication %s: its lease ran out during the call", publication.publication_id
            )


__all__ = ["CALLS_PER_PASS", "CALL_LEASE_SECONDS", "CampaignPublisher"]
