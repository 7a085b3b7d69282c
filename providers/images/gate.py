"""A bound on how many images one provider draws at once.

A post's images are drawn together (the image tool loop runs every call of a
round concurrently), and several runs may draw at the same time: each provider
holds one `DrawGate`, so a remote images API is never sent more than its
`IMAGE_CONCURRENCY` requests at once and the local renderer never keeps more
threads busy than the machine has cores.

A provider outlives an event loop (tests, `asyncio.run` per CLI command), and an
`asyncio.Semaphore` belongs to the loop that first waits on it: the gate keeps one
semaphore per running loop, each with the full bound.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def local_concurrency() -> int:
    """Return the local renderer's bound: the cores this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class DrawGate:
    """Let at most `limit` draws of one provider run at once, per event loop."""

    def __init__(self, limit: int) -> None:
        """Bound the draws.

        Args:
            limit: Draws at once (at least 1).

        Raises:
            ValueError: `limit` below 1.
        """
        if limit < 1:
            raise ValueError(f"a draw bound must be at least 1, not {limit}")
        self.limit = limit
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a free slot, hold it for the block."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.limit)
        async with gate:
            yield
