"""The crons service: a caller's crons, and the scheduler that fires their ticks.

A cron is a schedule and the run options each of its ticks runs with (its
`payload`, as the client sent them). The scheduler is an adapter like any other:
each tick turns the cron into a `RunSpec` (`cron_spec`, its one function) and runs
it through the engine's preparation, recorded in the transaction that moves the
cron's next tick on, so a tick fires once whatever the number of processes
(`engine.crons`). See docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from engine.crons import (
    CRON_POLL,
    CronRecord,
    CronScheduler,
    OnRunCompleted,
    check_schedule,
    check_timezone,
    iso,
    next_tick,
    parse_time,
    utc_now,
)
from engine.errors import Invalid, NotFound, RunsError
from engine.keys import OwnerCheck
from engine.records import RunRecord
from engine.repositories import CronRepository, CronTick
from engine.services.core import EngineCore
from engine.spec import RunOptions, RunSpec, stored_multitask_strategy
from engine.webhooks import check_webhook

log = logging.getLogger(__name__)

#: Ticks one pass of the cron scheduler fires at most (the rest wait for the next pass).
TICKS_PER_PASS = 100


def cron_spec(cron: CronRecord) -> RunSpec:
    """Return the run request a cron's tick makes (checked like any adapter's)."""
    options = RunOptions.from_json(cron.payload)
    return RunSpec(
        assistant_id=cron.assistant_id,
        owner=cron.owner,
        thread_id=cron.thread_id,
        input=options.input,
        stream_mode=options.stream_mode,
        stream_subgraphs=options.stream_subgraphs,
        stream_resumable=options.stream_resumable,
        on_disconnect="continue",
        config=options.config,
        interrupt_before=options.interrupt_before,
        interrupt_after=options.interrupt_after,
        durability=options.durability,
        webhook=options.webhook,
        on_completion=cron.on_run_completed if cron.thread_id is None else None,
        metadata={**cron.metadata, "cron_id": cron.cron_id},
        multitask_strategy=stored_multitask_strategy(cron.payload),
    )


class CronsService:
    """Crons, each owned by one API key, and their scheduler."""

    def __init__(
        self,
        core: EngineCore,
        crons: CronRepository,
        *,
        interval: float = CRON_POLL,
        clock: Callable[[], datetime] = utc_now,
        owners: OwnerCheck | None = None,
    ) -> None:
        """Serve crons from `crons`; the scheduler looks for due ones every `interval` s.

        Args:
            core: The engine's shared parts.
            crons: The backend's crons.
            interval: Seconds between two looks for due crons.
            clock: The scheduler's clock (tests move it on instead of waiting).
            owners: Says whether a cron's owner may still run (None: every owner may);
                a due cron whose owner may not is disabled instead of fired.
        """
        self._core = core
        self._crons = crons
        self._owners = owners
        #: Fires due ticks while started (`start`); its `clock` is the crons' clock.
        self.scheduler = CronScheduler(self.fire_due, clock=clock, interval=interval)

    def start(self) -> None:
        """Start firing due ticks in a task of this loop."""
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop firing (a pass in progress is cancelled; its transaction rolls back)."""
        await self.scheduler.stop()

    # -- CRUD --------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        assistant_id: str,
        thread_id: str | None,
        schedule: str,
        timezone: str | None = None,
        payload: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        on_run_completed: OnRunCompleted | None = None,
        end_time: datetime | None = None,
        enabled: bool = True,
    ) -> CronRecord:
        """Store a cron whose ticks start runs of `assistant_id`; return it.

        Args:
            owner: The caller, who owns the cron and its runs.
            assistant_id: The assistant each run runs (a built-in one, or the owner's).
            thread_id: The caller's thread every run goes to, or None (a new thread each).
            schedule: Five-field cron expression.
            timezone: IANA time zone the schedule is read in (None: UTC).
            payload: The runs' options as the client sent them (input, config, stream
                options, webhook, interrupt_before/after, durability, multitask_strategy).
            metadata: The cron's metadata (its runs carry it, with `cron_id`).
            on_run_completed: Thread-less crons: delete or keep each run's thread.
            end_time: No tick after it.
            enabled: False: no tick until it is enabled.

        Raises:
            RunsError: NotFound (assistant, thread), Invalid (schedule, timezone,
                end_time, the run options) or QuotaExceeded (the owner's `crons`).
        """
        assistant = await self._core.resolve(owner, assistant_id)
        if thread_id is not None:
            await self._core.thread(owner, thread_id)
            if on_run_completed is not None:
                raise Invalid(
                    "on_run_completed applies to crons without a thread", field="on_run_completed"
                )
        stamp = iso(self.scheduler.clock()) or ""
        cron = CronRecord(
            cron_id=str(uuid.uuid4()),
            owner=owner,
            assistant_id=assistant.assistant_id,
            thread_id=thread_id,
            schedule=schedule,
            timezone=timezone,
            payload=payload,
            metadata=metadata or {},
            on_run_completed=on_run_completed,
            end_time=iso(end_time),
            enabled=enabled,
            created_at=stamp,
            updated_at=stamp,
        )
        await self._check(cron)
        limits = await self._core.limits(owner)
        await self._crons.insert(cron, limit=limits.crons)
        return cron

    async def get(self, owner: str, cron_id: str) -> CronRecord:
        """Return the owner's cron; raise NotFound (also when another owner has it)."""
        cron = await self._crons.get(owner, cron_id)
        if cron is None:
            raise NotFound(f"cron {cron_id!r} not found")
        return cron

    async def update(self, owner: str, cron_id: str, changes: dict[str, Any]) -> CronRecord:
        """Change some of a cron's fields; return it.

        A new schedule, time zone, end time or `enabled` recomputes its next tick from
        now; other changes keep it. The write is refused when a tick was fired since
        the cron was read (its `next_run_at` moved), and the update is made again on
        the cron as it is then, so an update never brings back a tick already fired.

        Args:
            owner: The caller.
            cron_id: The cron.
            changes: New values of `schedule`, `timezone`, `end_time` (a datetime or
                None), `enabled`, `metadata`, `on_run_completed`, and run options that
                replace those in its payload (`payload`).

        Raises:
            RunsError: NotFound, or Invalid as `create` raises it.
        """
        while True:
            cron = await self.get(owner, cron_id)
            updated = dataclasses.replace(
                cron, payload={**cron.payload, **changes.get("payload", {})}
            )
            for name in ("schedule", "timezone", "enabled", "metadata", "on_run_completed"):
                if name in changes:
                    setattr(updated, name, changes[name])
            if "end_time" in changes:
                updated.end_time = iso(changes["end_time"])
            if updated.thread_id is not None and updated.on_run_completed is not None:
                raise Invalid(
                    "on_run_completed applies to crons without a thread", field="on_run_completed"
                )
            updated.updated_at = iso(self.scheduler.clock()) or ""
            await self._check(updated)
            if not {"schedule", "timezone", "end_time", "enabled"} & set(changes):
                updated.next_run_at = cron.next_run_at
            if await self._crons.replace(updated, previous_next_run_at=cron.next_run_at):
                return updated

    async def delete(self, owner: str, cron_id: str) -> None:
        """Delete the owner's cron: it fires no more (its runs so far stay)."""
        if not await self._crons.delete(owner, cron_id):
            raise NotFound(f"cron {cron_id!r} not found")

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
        return await self._crons.search(
            owner,
            assistant_id=assistant_id,
            thread_id=thread_id,
            enabled=enabled,
            metadata=metadata,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )

    async def count(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's crons match every given filter."""
        return await self._crons.count(
            owner, assistant_id=assistant_id, thread_id=thread_id, metadata=metadata
        )

    async def _check(self, cron: CronRecord) -> None:
        """Check a cron's schedule, time zone and run request; set its next tick.

        Raises:
            RunsError: NotFound (assistant) or Invalid, naming the field.
        """
        try:
            cron.schedule = check_schedule(cron.schedule)
        except ValueError as exc:
            raise Invalid(str(exc), field="schedule") from None
        try:
            cron.timezone = check_timezone(cron.timezone)
        except ValueError as exc:
            raise Invalid(str(exc), field="timezone") from None
        spec = cron_spec(cron)
        preparation = self._core.preparation
        preparation.check_request(spec, await self._core.resolve(cron.owner, cron.assistant_id))
        # Each tick's run is checked again; refuse at once what every tick would refuse.
        check_webhook(spec.webhook, preparation.webhooks)
        tick = next_tick(
            cron.schedule, cron.timezone, self.scheduler.clock(), parse_time(cron.end_time)
        )
        cron.next_run_at = iso(tick)

    # -- firing ------------------------------------------------------------------------

    async def fire_due(self, now: datetime) -> int:
        """Fire every cron due at `now` (the scheduler's pass); return how many runs started.

        Each tick is claimed (`CronRepository.claim_due`), its run prepared like any run
        request, and recorded in the transaction that moves the cron's `next_run_at` to
        its first tick after `now` (missed ticks are not made up). A tick whose request
        is refused (its thread is gone or busy, its assistant unknown) is spent without
        a run, logged.
        """
        core = self._core
        started = 0
        for _ in range(TICKS_PER_PASS):
            async with core.lock:
                if core.closing:
                    break
                async with self._crons.claim_due(iso(now) or "") as tick:
                    if tick is None:
                        break
                    fired = await self._fire(tick, now)
                if fired is not None:  # committed: now a worker (or this process) may start it
                    run, after = fired
                    core.executor.start(run, after=after, next_id=1)
                    started += 1
        return started

    async def _fire(self, tick: CronTick, now: datetime) -> tuple[RunRecord, list[str]] | None:
        """Record a claimed tick's run and spend the tick; return the run to start, if any."""
        cron = tick.cron
        if self._owners is not None and not await self._owners.active(cron.owner):
            # Its key was revoked (perhaps on another replica), expired, or left
            # AUTH_API_KEYS: it never fires again; an admin lists and deletes it.
            await tick.disable()
            log.warning("cron %s: disabled, its API key may no longer run", cron.cron_id)
            return None
        following = iso(next_tick(cron.schedule, cron.timezone, now, parse_time(cron.end_time)))
        try:
            spec = cron_spec(cron)
            assistant = await self._core.resolve(cron.owner, cron.assistant_id)
            limits = await self._core.limits(cron.owner)
            prepared = await self._core.preparation.prepare(spec, assistant)
        except RunsError as exc:
            log.warning("cron %s: tick %s skipped: %s", cron.cron_id, cron.next_run_at, exc)
            await tick.fire(following, None)
            return None
        if prepared.new_thread is not None:
            prepared.new_thread.metadata["cron_id"] = cron.cron_id
        stored = await tick.fire(
            following,
            prepared.run,
            new_thread=prepared.new_thread,
            exclusive=not prepared.after,
            limits=limits,
        )
        if not stored:
            log.warning(
                "cron %s: tick %s skipped: its thread is busy or its key over a quota",
                cron.cron_id,
                cron.next_run_at,
            )
            return None
        log.info(
            "cron %s: tick %s started run %s", cron.cron_id, cron.next_run_at, prepared.run.run_id
        )
        return prepared.run, prepared.after
