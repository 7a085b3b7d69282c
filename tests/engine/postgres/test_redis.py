"""Redis signals against a real redis-server: publish, subscribe, and surviving a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from engine.postgres.redis_pubsub import Gap, Message, Subscription, create_client, ping, publish
from tests.support.servers import RedisServer

WAIT = 15.0  # seconds: generous, the machine is shared


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = create_client(redis_server.url)
    yield client
    await client.aclose()


async def _next(sub: Subscription, want: type[Message] | type[Gap]) -> Message | Gap:
    """Return the next item of a type, skipping others, within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        item = await sub.get(timeout=0.5)
        if isinstance(item, want):
            return item
    raise AssertionError(f"no {want.__name__} within {WAIT} s")


async def _publish_until_received(client: Redis, sub: Subscription, data: bytes) -> Message:
    """Publish until the subscription gets it (a restarted server's first try may fail)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if await publish(client, "run:1", data):
            item = await _next(sub, Message)
            assert isinstance(item, Message)
            return item
        await asyncio.sleep(0.1)
    raise AssertionError("redis did not come back")


async def test_ping_publish_and_subscribe(client: Redis) -> None:
    await ping(client)
    async with Subscription(client, ["run:1", "run:2"]) as sub:
        assert sub.connected
        assert await publish(client, "run:1", b"frame 1") == 1
        assert await publish(client, "run:2", "frame 2") == 1
        assert await publish(client, "run:3", b"nobody listens") == 0
        assert await sub.get(timeout=WAIT) == Message("run:1", b"frame 1")
        assert await sub.get(timeout=WAIT) == Message("run:2", b"frame 2")
        assert await sub.get(timeout=0.2) is None


async def test_a_slow_reader_gets_a_gap_instead_of_unbounded_memory(client: Redis) -> None:
    async with Subscription(client, ["run:1"], max_queued=5) as sub:
        for i in range(20):
            await publish(client, "run:1", str(i))
        await asyncio.sleep(0.5)  # all delivered to the subscription, none read
        assert await sub.get(timeout=WAIT) == Gap("lagged")


async def test_a_redis_restart_mid_subscription_is_a_gap_then_messages_again(
    client: Redis, redis_server: RedisServer
) -> None:
    async with Subscription(client, ["run:1"]) as sub:
        assert await publish(client, "run:1", b"before") == 1
        assert await sub.get(timeout=WAIT) == Message("run:1", b"before")
        try:
            redis_server.stop()  # SIGKILL, as a crash
            assert await _next(sub, Gap) == Gap("disconnected")
            assert not sub.connected
            assert await publish(client, "run:1", b"lost") is None  # says so, never raises
            with pytest.raises((RedisError, OSError)):
                await ping(client)
        finally:
            redis_server.start()
        assert await _next(sub, Gap) == Gap("reconnected")
        assert sub.connected
        assert (await _publish_until_received(client, sub, b"after")).data == b"after"
        await ping(client)


async def test_a_subscription_opened_while_redis_is_down_starts_when_it_is_back(
    redis_server: RedisServer,
) -> None:
    redis_server.stop()
    try:
        client = create_client(redis_server.url)
        async with Subscription(client, ["run:1"]) as sub:
            assert not sub.connected
            redis_server.start()
            assert await _next(sub, Gap) == Gap("reconnected")
            assert (await _publish_until_received(client, sub, b"hello")).data == b"hello"
        await client.aclose()
    finally:
        if redis_server.process is None:
            redis_server.start()
