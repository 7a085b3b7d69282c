"""In-memory fan-out of committed frames to the SSE responses following a run.

The event log calls `Hub.publish` right after a batch of frames is committed; every
subscription of that run gets the frames at once (no polling). A subscriber that
falls too far behind (a slow client) is marked `lagged` and its buffer dropped: it
then catches up from the durable log, so memory stays bounded and nothing is lost.

The hub also knows which runs this process is executing (`run_live` / `run_gone`,
told by the executor), so a follower can tell a quiet run from a dead one: when
a run stops being executed, its followers are woken at once to re-read the log
(its `end` is there) or to learn that the run stalled.
"""

from __future__ import annotations

import asyncio
from collections import deque

from engine.records import Frame

#: Frames buffered per subscriber before it must catch up from the log instead.
SUBSCRIBER_BUFFER = 4096


class Subscription:
    """One follower of one run's frames."""

    def __init__(self, run_id: str, limit: int = SUBSCRIBER_BUFFER) -> None:
        """Create an empty subscription for `run_id`."""
        self.run_id = run_id
        self.lagged = False  # frames were dropped: re-read the log after the last id sent
        self._limit = limit
        self._frames: deque[Frame] = deque()
        self._ready = asyncio.Event()

    def push(self, frames: list[Frame]) -> None:
        """Buffer frames (called by the hub)."""
        if self.lagged:
            return
        if len(self._frames) + len(frames) > self._limit:
            self.lagged = True
            self._frames.clear()
        else:
            self._frames.extend(frames)
        self._ready.set()

    async def next_batch(self, wait: float) -> list[Frame] | None:
        """Return the buffered frames, waiting up to `wait` seconds for some.

        Returns:
            The frames (empty when the subscription lagged: read the log), or None
            when nothing came within `wait` seconds.
        """
        if not self._frames and not self.lagged:
            try:
                async with asyncio.timeout(wait):
                    await self._ready.wait()
            except TimeoutError:
                return None
        self._ready.clear()
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def caught_up(self) -> None:
        """Resume live delivery after the subscriber re-read the log."""
        self.lagged = False

    def poke(self) -> None:
        """Wake the subscriber with no frames (the run's state changed: re-check it)."""
        self._ready.set()


class Hub:
    """Subscriptions by run id."""

    def __init__(self, subscriber_buffer: int = SUBSCRIBER_BUFFER) -> None:
        """Create a hub whose subscriptions buffer up to `subscriber_buffer` frames."""
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._buffer = subscriber_buffer
        self._live: set[str] = set()

    @property
    def subscriber_count(self) -> int:
        """Number of live subscriptions."""
        return self._count

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run; frames published from now on are buffered."""
        sub = Subscription(run_id, self._buffer)
        self._subs.setdefault(run_id, set()).add(sub)
        self._count += 1
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; idempotent."""
        subs = self._subs.get(sub.run_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        if not subs:
            del self._subs[sub.run_id]
        self._count -= 1

    def run_live(self, run_id: str) -> None:
        """Note that this process executes the run from now on."""
        self._live.add(run_id)

    def run_gone(self, run_id: str) -> None:
        """Note that this process stopped executing the run, and wake its followers."""
        self._live.discard(run_id)
        for sub in self._subs.get(run_id, ()):
            sub.poke()

    def poke_all(self) -> None:
        """Wake every follower with no frames, to re-read the log (live frames may be missing)."""
        for subs in self._subs.values():
            for sub in subs:
                sub.poke()

    def is_live(self, run_id: str) -> bool:
        """Whether this process is executing the run."""
        return run_id in self._live

    def publish(self, run_id: str, frames: list[Frame]) -> None:
        """Hand committed frames to every subscription of the run."""
        for sub in self._subs.get(run_id, ()):
            sub.push(frames)
