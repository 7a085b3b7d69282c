"""The engine's executor in the scale-out deployment: the queue, not this process.

`QueueExecutor` is what an API replica's engine executes runs with when
`DATABASE_URL` is set. The runs service records a new run as pending, as always; its
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

from langchain_core.runnables import RunnableConfig

from engine.execution import CancelReason, Runner
from engine.postgres.signals import RunSignals
from engine.protocols import LiveFrames
from engine.records import CancelAction, RunRecord

log = logging.getLogger(__name__)

#: Seconds between two reads of a run's record while waiting for it (live frames
#: usually wake the waiter first).
WAIT_POLL = 1.0


class QueueExecutor:
    """Leave execution to the workers; record and signal instead (see the module docstring).

    It implements `engine.protocols.RunExecutor`; it writes no run's frames.
    """

    def __init__(self, runner: Runner, live: LiveFrames, signals: RunSignals) -> None:
        """Answer for runs with `runner`, follow them on `live`, reach workers by `signals`."""
        self.runner = runner
        self.hub = live
        self.runs = runner.runs
        self.events = runner.events
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

    def ended(self, run_id: str) -> tuple[RunRecord, dict[str, Any]] | None:
        """Return the record and result of a run deleted as it ended, if this process knows it."""
        return self.runner.ended.get(run_id)

    def graph_config(self, thread_id: str, run: RunRecord | None = None) -> RunnableConfig:
        """Return the LangGraph config of a thread (and of a run on it)."""
        return self.runner.graph_config(thread_id, run)

    async def abandon(self, run: RunRecord, next_id: int) -> None:
        """End a run that used up its attempts (`Runner.abandon`; workers do it as they claim)."""
        await self.runner.abandon(run, next_id)

    async def shutdown(self) -> None:
        """Commit what this process queued (thread-state changes); no run executes here."""
        await self.events.flush()
