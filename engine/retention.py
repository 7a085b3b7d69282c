"""Retention: threads that expire (their TTL), and the sweep that acts on them.

A thread may have a TTL (the LangGraph Platform's: `{"strategy", "ttl"}` minutes on
create and update, a deployment default in THREAD_TTL_MINUTES and
THREAD_TTL_STRATEGY). It runs out `minutes` after it was set, counted again from
each start and end of a run on the thread (`ThreadTTL.expires_at`), so a thread in
use is not swept from under its user. Then the sweep acts with its strategy:

- `delete`: the thread goes with its runs, event logs and checkpoints, as
  `DELETE /threads/{t}` does;
- `keep_latest`: its checkpoints but the latest of each namespace are dropped; its
  state stays readable, its runs stay, a new run continues from it, and its TTL
  counts again from the sweep.

A sweep claims expired threads with no pending or running run
(`RetentionRepository.claim_expired`: `FOR UPDATE SKIP LOCKED` in PostgreSQL, one
`UPDATE … RETURNING` under SQLite's write lock) and holds each under a lease, so two
processes never sweep one thread; a sweep that died leaves its claims to run out.
It also prunes webhook deliveries that ended more than WEBHOOK_RETENTION_HOURS ago
(`engine.webhooks.DeliveryStore.prune`) and the event logs of old runs
(EVENT_RETENTION_HOURS). Every process of the deployment runs it every
RETENTION_SWEEP_MINUTES (`engine.services.retention.RetentionService`). See
docs/retention.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from engine.records import ThreadTTL, TtlStrategy

log = logging.getLogger(__name__)

#: The longest TTL a thread may have, in minutes (ten years).
MAX_TTL_MINUTES = 5_256_000.0
#: Threads one sweep claims at a time, and at most in all (the rest wait for the next).
SWEEP_BATCH = 100
SWEEP_LIMIT = 10_000
#: Seconds a sweep's claim on a thread keeps it from other sweeps.
SWEEP_LEASE = 300.0


def utc_now() -> datetime:
    """Return the current time in UTC (the sweep's default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class RetentionConfig:
    """The deployment's retention settings (`from_settings`)."""

    #: The TTL of a thread created without one (None: kept until deleted).
    default_ttl: ThreadTTL | None = None
    #: Seconds between two sweeps of this process (0: it sweeps nothing).
    sweep_interval: float = 300.0
    #: Hours an ended webhook delivery is kept (0: for ever).
    webhook_retention_hours: float = 168.0

    @classmethod
    def from_settings(cls, settings: Any) -> RetentionConfig:
        """Return the config of `core.settings.Settings`."""
        minutes = settings.thread_ttl_minutes
        default = None if minutes is None else ThreadTTL(settings.thread_ttl_strategy, minutes)
        return cls(
            default_ttl=default,
            sweep_interval=settings.retention_sweep_minutes * 60,
            webhook_retention_hours=settings.webhook_retention_hours,
        )


@dataclass(frozen=True)
class ExpiredThread:
    """A thread a sweep claimed: whose it is and what its TTL says to do."""

    thread_id: str
    owner: str
    strategy: TtlStrategy


@dataclass
class SweepReport:
    """What one sweep did."""

    #: Threads deleted (strategy `delete`).
    deleted: list[str] = field(default_factory=list)
    #: Threads pruned to their latest state (strategy `keep_latest`).
    kept_latest: list[str] = field(default_factory=list)
    #: Ended webhook deliveries pruned.
    deliveries: int = 0
    #: Runs whose event logs were pruned.
    event_logs: int = 0


class RetentionRepository(Protocol):
    """The claims on expired threads of one backend (`engine.sqlite.retention`, …)."""

    async def claim_expired(
        self, worker: str, now: datetime, limit: int, lease_seconds: float
    ) -> list[ExpiredThread]:
        """Claim up to `limit` threads expired at `now` with no pending or running run.

        A thread another sweep holds (its lease not run out at `now`) is left alone;
        the claim lasts `lease_seconds` from `now`. Oldest expiry first.
        """
        ...

    async def holds(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Whether `worker` still holds the thread, expired at `now` and with no active run.

        False once its TTL was set again or a run began on it since the claim.
        """
        ...

    async def rearm(self, worker: str, thread_id: str, now: datetime) -> bool:
        """Count a held thread's TTL again from `now` and release it; False: not held."""
        ...

    async def release(self, worker: str, thread_id: str) -> None:
        """Release a claim without acting on the thread (the next sweep may take it)."""
        ...


class RetentionSweeper:
    """Sweep every `interval` seconds with the clock's time, until stopped."""

    def __init__(
        self,
        sweep: Callable[[datetime], Awaitable[Any]],
        *,
        clock: Callable[[], datetime] = utc_now,
        interval: float,
    ) -> None:
        """Sweep with `sweep(now)`; `clock` says the time (tests move it on)."""
        self.sweep = sweep
        self.clock = clock
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sweeping in a task of this loop (the first sweep at once)."""
        if self._task is None and self.interval > 0:
            self._task = asyncio.create_task(self._loop(), name="retention-sweeper")

    async def stop(self) -> None:
        """Stop sweeping (a sweep in progress is cancelled; its claims run out)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep(self.clock())
            except Exception:  # the database is unreachable now: try again next time
                log.exception("the retention sweep failed")
            await asyncio.sleep(self.interval)


__all__ = [
    "MAX_TTL_MINUTES",
    "SWEEP_BATCH",
    "SWEEP_LEASE",
    "SWEEP_LIMIT",
    "ExpiredThread",
    "RetentionConfig",
    "RetentionRepository",
    "RetentionSweeper",
    "SweepReport",
    "utc_now",
]
