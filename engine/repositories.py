"""The repositories of the resources beside threads and runs: crons and created assistants.

Each has one implementation per backend (`engine/sqlite/`, `engine/postgres/`, built by
`engine.opener` for the backend's kind), owned by one API key per row (another key
reads None, as for none); the engine's services use them (`engine.services.crons`,
`engine.services.assistants`). A new resource keeps its protocol beside its service
(docs/architecture.md, "Adding a resource").
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from engine.assistants import AssistantRecord
from engine.crons import CronRecord
from engine.quotas import Limits
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
        limits: Limits | None = None,
    ) -> bool:
        """Record the tick's run (if any) and move `next_run_at` on, in one transaction.

        Args:
            next_run_at: The cron's next tick (None: it is over).
            run: The run to store as `RunRepository.insert` stores it, or None to
                skip the tick (its request was refused).
            new_thread: A thread to create with the run.
            exclusive: Store the run only if its thread has no pending or running run.
            limits: The owner's limits, counted as `RunRepository.insert` counts them.

        Returns:
            Whether the run was stored (False: skipped, its thread was busy, or its
            owner over a limit; the tick is spent either way).
        """
        ...

    async def disable(self) -> None:
        """Disable the cron in the claim's transaction: its owner's key may no longer run.

        Its `next_run_at` stays, so enabling it again recomputes the next tick as usual.
        """
        ...


class CronRepository(Protocol):
    """Crons, each owned by one API key, and the claiming of their due ticks."""

    async def insert(self, cron: CronRecord, *, limit: int | None = None) -> None:
        """Store a new cron.

        With `limit`, only while its owner has fewer crons, counted in the insert's
        transaction (in turn with every other process's); else `QuotaExceeded`.
        """
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

    async def insert(self, record: AssistantRecord, *, limit: int | None = None) -> None:
        """Store a new assistant with its first version (`record`).

        With `limit`, only while its owner has fewer assistants, counted in the
        insert's transaction (in turn with every other process's).

        Raises:
            AssistantExists: The id is taken, by any owner.
            QuotaExceeded: The owner has `limit` assistants.
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
