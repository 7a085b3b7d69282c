"""The webhook read side: a run's deliveries, the outbox's totals, and waiting for them.

Deliveries are queued with a run's end and sent by the deliverer the engine's opener
runs (`engine.webhooks`); this service reads them. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from engine.errors import NotFound
from engine.protocols import RunRepository
from engine.webhooks import DeliveryStore, OutboxTotals

#: Seconds between two reads of the outbox while waiting for deliveries.
SETTLE_POLL = 0.1


class WebhooksService:
    """The webhook outbox, read."""

    def __init__(self, deliveries: DeliveryStore, runs: RunRepository) -> None:
        """Read `deliveries`; find the runs they report in `runs`."""
        self._deliveries = deliveries
        self._runs = runs

    async def for_run(self, owner: str, thread_id: str, run_id: str) -> list[dict[str, Any]]:
        """Return the webhook deliveries of the owner's run, each with its attempts.

        Raises:
            NotFound: The owner has no such run on that thread.
        """
        if await self._runs.find(owner, thread_id, run_id) is None:
            raise NotFound(f"run {run_id!r} not found")
        return await self._deliveries.for_run(run_id)

    async def totals(self) -> OutboxTotals:
        """Return the whole webhook outbox's deliveries by status and attempts by outcome."""
        return await self._deliveries.totals()

    async def settle(self, run_ids: Sequence[str], within: float) -> list[dict[str, Any]]:
        """Wait until each delivery of the runs was tried once (at most `within` s); return them.

        What a short-lived process (`atelier run`) waits for before it closes: a
        delivery not sent by then stays in the outbox, and the next process that
        delivers (on the same database) sends it.
        """
        deadline = time.monotonic() + within
        while True:
            found = [d for run_id in run_ids for d in await self._deliveries.for_run(run_id)]
            untried = [d for d in found if d["status"] == "pending" and not d["attempts"]]
            if not untried or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(SETTLE_POLL)
