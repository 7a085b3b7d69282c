"""In-memory fan-out of committed frames to the SSE responses following a run.

The run store calls `Hub.publish` right after a batch of frames is committed; every
subscription of that run gets the frames at once (no polling). A subscriber that
falls too far behind (a slow client) is marked `lagged` and its buffer dropped: it
then catches up from the durable log, so memory stays bounded and nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections import deque

from app.runs.store import Frame

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


class Hub:
    """Subscriptions by run id."""

    def __init__(self, subscriber_buffer: int = SUBSCRIBER_BUFFER) -> None:
        """Create a hub whose subscriptions buffer up to `subscriber_buffer` frames."""
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._buffer = subscriber_buffer

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

    def publish(self, run_id: str, frames: list[Frame]) -> None:
        """Hand committed frames to every subscription of the run."""
        for sub in self._subs.get(run_id, ()):
            sub.push(frames)
