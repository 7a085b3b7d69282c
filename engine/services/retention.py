"""The retention service: the sweep of expired threads, ended deliveries and old event logs.

Each process that serves or works runs a sweep every RETENTION_SWEEP_MINUTES
(`engine.retention.RetentionSweeper`, started by the engine's opener). A sweep claims
expired threads in batches (a claim is the database's: no two processes sweep one
thread), checks each is still held, expired and idle, and applies its strategy
through the threads service — `delete` as `DELETE /threads/{t}`, `keep_latest` by
pruning its checkpoints and counting its TTL again — then prunes the webhook
deliveries that ended before WEBHOOK_RETENTION_HOURS and the event logs older than
EVENT_RETENTION_HOURS. A thread it could not act on keeps its claim until the lease
runs out, so the next sweep tries it again rather than this one in a loop. See
docs/retention.md.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from engine.retention import (
    SWEEP_BATCH,
    SWEEP_LEASE,
    SWEEP_LIMIT,
    ExpiredThread,
    RetentionConfig,
    RetentionRepository,
    RetentionSweeper,
    SweepReport,
    utc_now,
)
from engine.services.core import EngineCore
from engine.services.threads import ThreadsService

log = logging.getLogger(__name__)


class RetentionService:
    """Sweeps what the deployment's retention settings and the threads' TTLs let go."""

    def __init__(
        self,
        core: EngineCore,
        threads: ThreadsService,
        repository: RetentionRepository,
        config: RetentionConfig,
        *,
        clock: Callable[[], datetime] = utc_now,
        worker: str | None = None,
    ) -> None:
        """Sweep with `repository`'s claims and `threads`' deletes and prunes.

        Args:
            core: The engine's shared parts (the outbox, the event logs).
            threads: Deletes and prunes the threads swept.
            repository: The backend's claims on expired threads.
            config: The deployment's retention settings.
            clock: The sweeper's clock (tests move it on instead of waiting).
            worker: The name its claims carry (default: unique to this service).
        """
        self._core = core
        self._threads = threads
        self._repository = repository
        self.config = config
        self.worker = worker or f"sweeper-{uuid.uuid4().hex[:12]}"
        #: Sweeps every `config.sweep_interval` seconds while started, at its clock's time.
        self.sweeper = RetentionSweeper(self.sweep, clock=clock, interval=config.sweep_interval)

    def start(self) -> None:
        """Start sweeping in a task of this loop (never, with a sweep interval of 0)."""
        self.sweeper.start()

    async def stop(self) -> None:
        """Stop sweeping (the claims of a sweep cut short run out with their lease)."""
        await self.sweeper.stop()

    async def sweep(self, now: datetime | None = None) -> SweepReport:
        """Sweep once at `now` (default: the present); return what it did."""
        now = now or utc_now()
        report = SweepReport()
        for _ in range(SWEEP_LIMIT // SWEEP_BATCH):
            claimed = await self._repository.claim_expired(
                self.worker, now, SWEEP_BATCH, SWEEP_LEASE
            )
            for thread in claimed:
                try:
                    await self._expire(thread, now, report)
                except Exception:  # its claim runs out: the next sweep tries it again
                    log.exception("retention: could not sweep thread %s", thread.thread_id)
            if len(claimed) < SWEEP_BATCH:
                break
        hours = self.config.webhook_retention_hours
        if hours > 0:
            report.deliveries = await self._core.storage.deliveries.prune(
                now - timedelta(hours=hours)
            )
        report.event_logs = await self._core.prune_events()
        if report.deleted or report.kept_latest or report.deliveries:
            log.info(
                "retention: %d threads deleted, %d pruned to their latest state, "
                "%d webhook deliveries pruned",
                len(report.deleted),
                len(report.kept_latest),
                report.deliveries,
            )
        return report

    async def _expire(self, thread: ExpiredThread, now: datetime, report: SweepReport) -> None:
        """Apply a claimed thread's TTL strategy, unless it is no longer expired or idle."""
        repository, thread_id = self._repository, thread.thread_id
        if not await repository.holds(self.worker, thread_id, now):
            await repository.release(self.worker, thread_id)  # its TTL was set again, or it ran
            return
        if thread.strategy == "delete":
            await self._threads.remove(thread_id)
            report.deleted.append(thread_id)
        elif await self._threads.keep_latest(thread_id):
            await repository.rearm(self.worker, thread_id, now)
            report.kept_latest.append(thread_id)
        else:  # a run began on it meanwhile, or its saver cannot prune it: not before a TTL
            await repository.rearm(self.worker, thread_id, now)


__all__ = ["RetentionService"]
