"""Live frames across processes over a real Redis, and the fall back to the log when it drops."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from engine.postgres.live import RedisLiveFrames
from engine.postgres.redis_pubsub import create_client
from engine.records import Frame
from tests.support.servers import RedisServer

WAIT = 15.0


@pytest.fixture
async def two(redis_server: RedisServer) -> AsyncIterator[tuple[RedisLiveFrames, RedisLiveFrames]]:
    clients = [create_client(redis_server.url) for _ in range(2)]
    lives = [RedisLiveFrames(client, poll=0.1) for client in clients]
    for live in lives:
        await live.start()
    yield lives[0], lives[1]
    for live in lives:
        await live.close()
    for client in clients:
        await client.aclose()


def _frames(*ids: int) -> list[Frame]:
    return [Frame(i, "custom", f'{{"n":{i}}}') for i in ids]


async def test_frames_reach_followers_in_every_process_once(
    two: tuple[RedisLiveFrames, RedisLiveFrames],
) -> None:
    a, b = two
    here, there = a.subscribe("r1"), b.subscribe("r1")
    a.publish("r1", _frames(1, 2))
    a.publish("r1", _frames(3))
    assert await here.next_batch(WAIT) == _frames(1, 2, 3)  # at once, locally
    got: list[Frame] = []
    deadline = time.monotonic() + WAIT
    while len(got) < 3 and time.monotonic() < deadline:
        got += await there.next_batch(WAIT) or []
    assert got == _frames(1, 2, 3)
    assert await here.next_batch(0.3) is None  # its own message is not fed again
    assert a.is_live("r1") and b.is_live("anything")
    a.unsubscribe(here)
    b.unsubscribe(there)
    assert a.subscriber_count == b.subscriber_count == 0


async def test_followers_are_sent_to_the_log_while_redis_is_down(
    two: tuple[RedisLiveFrames, RedisLiveFrames], redis_server: RedisServer
) -> None:
    fallbacks: list[int] = []
    a, b = two
    b._on_fallback = lambda: fallbacks.append(1)
    there = b.subscribe("r1")
    try:
        redis_server.stop()
        pokes = 0
        deadline = time.monotonic() + WAIT
        while pokes < 3 and time.monotonic() < deadline:  # woken again and again: re-read
            if await there.next_batch(1.0) == []:
                pokes += 1
        assert pokes == 3 and fallbacks
        assert not b.connected
    finally:
        redis_server.start()
    deadline = time.monotonic() + WAIT
    got: list[Frame] = []
    while not got and time.monotonic() < deadline:  # until both are back on Redis
        a.publish("r1", _frames(7))
        got = [f for f in await there.next_batch(0.5) or [] if f.id == 7]
    assert got == _frames(7)
