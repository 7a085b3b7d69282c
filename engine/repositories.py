"""The repositories of the resources beside threads and runs: crons, assistants, campaigns.

Each has one implementation per backend (`engine/sqlite/`, `engine/postgres/`), owned
by one API key per row (another key reads None, as for none); the engine's services
use them (`engine.services.crons`, `engine.services.assistants`,
`engine.services.campaigns`). A new resource's
storage protocol goes here too (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from engine.assistants import AssistantRecord
from engine.campaigns import CampaignRecord, CampaignStatus, Publication
from engine.crons import CronRecord
from engine.records import RunRecord, ThreadRecord


class CronTick(Protocol):
    """A due cron claimed for firing: nobody else fires it until `fire` commits or fails."""

    #: The cron as claimed; its `next_run_at` is the tick being fired.
    cron: CronRecord

    async def fire(
        self,
        next_run_at: str | None,
        run: RunRecord | None,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool = True,
    ) -> bool:
        """Record the tick's run (if any) and move `next_run_at` on, in one transaction.

        Args:
            next_run_at: The cron's next tick (None: it is over).
            run: The run to store as `RunRepository.insert` stores it, or None to
                skip the tick (its request was refused).
            new_thread: A thread to create with the run.
            exclusive: Store the run only if its thread has no pending or running run.

        Returns:
            Whether the run was stored (False: skipped, or its thread was busy; the
            tick is spent either way).
        """
        ...


class CronRepository(Protocol):
    """Crons, each owned by one API key, and the claiming of their due ticks."""

    async def insert(self, cron: CronRecord) -> None:
        """Store a new cron."""
        ...

    async def get(self, owner: str, cron_id: str) -> CronRecord | None:
        """Return the owner's cron, or None (also when another owner has it)."""
        ...

    async def replace(self, cron: CronRecord, *, previous_next_run_at: str | None) -> bool:
        """Write a cron's schedule, payload, state and next tick, if its tick did not move.

        Returns:
            False when its `next_run_at` is no longer `previous_next_run_at` (a tick
            fired since it was read; read it again), or it is gone.
        """
        ...

    async def delete(self, owner: str, cron_id: str) -> bool:
        """Delete the owner's cron; False when the owner has none by that id."""
        ...

    async def search(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[CronRecord]:
        """Return the owner's crons matching every given filter."""
        ...

    async def count(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's crons match every given filter."""
        ...

    def claim_due(self, now: str) -> AbstractAsyncContextManager[CronTick | None]:
        """Claim one enabled cron whose `next_run_at` is at or before `now` (None: none is).

        The claim holds until the block ends; a cron another process holds is skipped.
        """
        ...


class AssistantExists(RuntimeError):
    """An assistant id is taken (by any owner)."""


class AssistantRepository(Protocol):
    """Assistants clients created, each owned by one API key, with their versions.

    A version is never changed once written; `update` adds one and makes it the
    latest, `set_latest` points the assistant at another. Every read answers the
    owner's assistant only (None or False for another owner's, as for none).
    """

    async def insert(self, record: AssistantRecord) -> None:
        """Store a new assistant with its first version (`record`).

        Raises:
            AssistantExists: The id is taken, by any owner.
        """
        ...

    async def get(
        self, owner: str, assistant_id: str, version: int | None = None
    ) -> AssistantRecord | None:
        """Return the owner's assistant at its latest version (or at `version`), or None."""
        ...

    async def update(
        self, owner: str, assistant_id: str, changes: dict[str, Any], stamp: str
    ) -> AssistantRecord | None:
        """Write a new version: the latest one with `changes` (its fields), made the latest.

        Returns:
            The new version, or None when the owner has no such assistant.
        """
        ...

    async def set_latest(
        self, owner: str, assistant_id: str, version: int
    ) -> AssistantRecord | None:
        """Make `version` the one runs use; return it (None: no such assistant or version)."""
        ...

    async def versions(
        self,
        owner: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[AssistantRecord]:
        """Return the assistant's versions matching `metadata`, newest first."""
        ...

    async def delete(self, owner: str, assistant_id: str) -> bool:
        """Delete the owner's assistant with every version; False when there is none."""
        ...

    async def search(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[AssistantRecord]:
        """Return the owner's assistants (at their latest versions) matching every filter."""
        ...

    async def count(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's assistants match every given filter."""
        ...


class CampaignClaim(Protocol):
    """An active campaign claimed by one driver pass: nobody else drives it until it ends."""

    #: The campaign as claimed.
    campaign: CampaignRecord

    async def save(
        self, campaign: CampaignRecord, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write the campaign (its version bumped) and its new publications with the claim.

        Returns:
            False when it changed since it was claimed (a person's edit): nothing was
            written; the next pass reads it again.
        """
        ...


class CampaignRepository(Protocol):
    """Campaigns, each owned by one API key, their publications, and the claims on both.

    A campaign is written whole (its items are a JSON document of the row) and only
    while its `version` is the one read (`replace`), so a person's edit and a driver
    pass never overwrite each other. Publications are rows of their own: the
    publisher claims the due ones (`claim_calls`, `hand_to_outbox`) in any process.
    """

    async def insert(self, campaign: CampaignRecord) -> None:
        """Store a new campaign."""
        ...

    async def get(self, owner: str, campaign_id: str) -> CampaignRecord | None:
        """Return the owner's campaign, or None (also when another owner has it)."""
        ...

    async def replace(
        self, campaign: CampaignRecord, *, version: int, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write a campaign read at `version` (bumping it) and its new publications.

        Returns:
            False when its version moved (or it is gone): nothing was written.
        """
        ...

    async def delete(self, owner: str, campaign_id: str) -> bool:
        """Delete the owner's campaign and its publications; False when there is none."""
        ...

    async def search(
        self,
        owner: str,
        *,
        status: CampaignStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[CampaignRecord]:
        """Return the owner's campaigns (of one status, if given), newest first."""
        ...

    def claim_next(self, after: str) -> AbstractAsyncContextManager[CampaignClaim | None]:
        """Claim the active campaign with the smallest id above `after` that nobody holds."""
        ...

    async def publications(self, owner: str, campaign_id: str) -> list[Publication]:
        """Return a campaign's publications by slot (a webhook's as its delivery stands)."""
        ...

    async def hand_to_outbox(self, now: str) -> int:
        """Queue the webhook publications due at `now` in the webhook outbox; return how many.

        Each is queued once (its delivery's id is derived from it, `engine.publishing`),
        in the transaction that marks it handed over; from then on its delivery's
        status, attempts and error are its own.
        """
        ...

    async def claim_calls(
        self, now: str, worker: str, lease_seconds: float, limit: int
    ) -> list[Publication]:
        """Lease up to `limit` due MCP publications to `worker`, marking them `sending`.

        Each claim counts an attempt; what is claimed is committed before it returns.
        """
        ...

    async def record_call(
        self,
        publication: Publication,
        *,
        worker: str,
        status: str,
        error: str | None = None,
        external_id: str | None = None,
        answer: str | None = None,
        published_at: str | None = None,
        next_attempt_at: str | None = None,
    ) -> bool:
        """Record how a claimed call went; False when `worker` no longer held it."""
        ...

    async def expire_calls(self) -> int:
        """Mark `unknown` the calls whose sender's lease ran out mid-call; return how many."""
        ...
