"""The run manager's executor in the scale-out deployment: the queue, not this process.

`QueueExecutor` is what an API replica's `RunManager` executes runs with when
`DATABASE_URL` is set. The run manager records a new run as pending, as always; its
`start` only wakes the workers (`RunSignals.wake`), and whichever worker claims the
run executes it (`engine.postgres.worker`). Cancels are recorded in the run's row
and signalled (`RunSignals.cancel`); waiting for a run follows its record and its
live frames, wherever it executes. A thread's state and a run's result are read by
`engine.reads` (from checkpoints and records, shared by all), not by an executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from engine.executor import CancelReason, InProcessExecutor
from engine.postgres.signals import RunSignals
from engine.records import CancelAction, RunRecord

log = logging.getLogger(__name__)

#: Seconds between two reads of a run's record while waiting for it (live frames
#: usually wake the waiter first).
WAIT_POLL = 1.0


class QueueExecutor(InProcessExecutor):
    """Leave execution to the workers; record and signal instead (see the module docstring)."""

    def __init__(self, *, signals: RunSignals, **options: Any) -> None:
        """Bind to the signals; `options` are `InProcessExecutor`'s."""
        storage = options["storage"]
        on_lost = storage.events.on_lost
        super().__init__(**options)
        storage.events.on_lost = on_lost  # this executor writes no run's frames
        self.signals = signals
        self._cancels: dict[str, asyncio.Task[bool]] = {}

    def start(self, run: RunRecord, *, after: Sequence[str] = (), next_id: int = 1) -> None:
        """Wake the workers: the run is pending in the queue already (`after` is its order)."""
        self.signals.wake()

    def is_active(self, run_id: str) -> bool:
        """True: any worker may be executing it (its record says whether it is active)."""
        return True

    def active_on(self, thread_id: str) -> list[str]:
        """Return no run: this process executes none."""
        return []

    def cancel(self, run_id: str, reason: CancelReason) -> None:
        """Record and signal a client's cancel of the run (returns at once)."""
        if reason not in ("interrupt", "rollback"):
            return
        task = asyncio.create_task(self.signals.cancel(run_id, reason))
        self._cancels[run_id] = task
        task.add_done_callback(lambda _t: self._cancels.pop(run_id, None))

    async def cancel_all(self, run_ids: Sequence[str], action: CancelAction) -> None:
        """Cancel runs and wait until each has stopped."""
        for run_id in run_ids:
            await self.signals.cancel(run_id, action)
        await asyncio.gather(*(self.wait(run_id) for run_id in run_ids))

    async def wait(self, run_id: str) -> None:
        """Wait until the run is no longer pending or running (or is gone)."""
        pending = self._cancels.get(run_id)
        if pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)
        sub = self.hub.subscribe(run_id)
        try:
            while True:
                record = await self.runs.get(run_id)
                if record is None or not record.active:
                    return
                sub.caught_up()  # the record was re-read: a lag is made up for
                while True:  # its `end` commits with its final status: re-read then
                    batch = await sub.next_batch(WAIT_POLL)
                    if not batch or any(frame.event == "end" for frame in batch):
                        break
        finally:
            self.hub.unsubscribe(sub)

    async def shutdown(self) -> None:
        """Commit what this process queued (thread-state changes); no run executes here."""
        await self.events.flush()
