"""Start many streamed runs at once against a live server and collect how each ended."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx

from tests.app.harness import SseFrame

#: Streams one run on a client and returns its frames.
StreamRun = Callable[[httpx.AsyncClient, int], Awaitable[list[SseFrame]]]


async def stream_all(
    url: str, runs: int, deadline: float, stream_run: StreamRun
) -> list[list[SseFrame] | BaseException]:
    """Run `stream_run(client, i)` for i in range(runs) at once, all within `deadline` s.

    Returns each run's frames, or the exception it raised (a `TimeoutError` for a
    run with no end by the deadline), in order.
    """
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    async with httpx.AsyncClient(base_url=url, timeout=deadline, limits=limits) as client:
        tasks = [asyncio.ensure_future(stream_run(client, i)) for i in range(runs)]
        _done, pending = await asyncio.wait(tasks, timeout=deadline)
        for task in pending:
            task.cancel()
        return [
            TimeoutError("no end within the deadline")
            if task in pending
            else (task.exception() or task.result())
            for task in tasks
        ]
