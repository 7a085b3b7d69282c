"""Wake-ups and cancels between the processes of the scale-out deployment.

PostgreSQL holds what matters (a pending run, a requested cancel); Redis only says
so sooner than a poll would. `RunSignals.wake()` tells workers a run is waiting to
be claimed (a lost wake-up costs at most a worker's poll interval);
`RunSignals.cancel()` records the cancel in the run's row first (`cancel_requested`,
which the executing worker reads on every lease renewal) and then signals it, so a
signal sent before the worker listened is not missed, only later. Workers of this
process are told directly as well (`local`), so a single-process deployment without
Redis reacts at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis

from engine.postgres import redis_pubsub as redis_signals
from engine.postgres.runs import PostgresRunRepository
from engine.records import CancelAction

log = logging.getLogger(__name__)

#: Channel of "a run is pending" (no payload).
WAKE_CHANNEL = "atelier:wake"
#: Channel of "cancel this run": "<action> <run id>".
CANCEL_CHANNEL = "atelier:cancel"


class RunSignals:
    """Send wake-ups and cancels to every worker (see the module docstring)."""

    def __init__(self, runs: PostgresRunRepository, client: Redis | None) -> None:
        """Record cancels in `runs`; signal through `client` (None: this process only)."""
        self._runs = runs
        self._client = client
        #: This process's workers: called with nothing (wake) or a run id and action.
        self.local_wake: list[Callable[[], None]] = []
        self.local_cancel: list[Callable[[str, CancelAction], None]] = []
        self._sending: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Tell workers a run is pending (best effort, returns at once)."""
        for wake in self.local_wake:
            wake()
        if self._client is not None:
            self._spawn(redis_signals.publish(self._client, WAKE_CHANNEL, b"1"))

    async def cancel(self, run_id: str, action: CancelAction) -> bool:
        """Record a cancel of a run and signal it; return False when the run is not active."""
        if not await self._runs.request_cancel(run_id, action):
            return False
        for cancel in self.local_cancel:
            cancel(run_id, action)
        if self._client is not None:
            await redis_signals.publish(self._client, CANCEL_CHANNEL, f"{action} {run_id}")
        return True

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coroutine)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)


def parse_cancel(data: bytes) -> tuple[CancelAction, str] | None:
    """Return the action and run id of a cancel message, or None when it is malformed."""
    action, _, run_id = data.decode(errors="replace").partition(" ")
    if action not in ("interrupt", "rollback") or not run_id:
        return None
    return action, run_id  # type: ignore[return-value]
