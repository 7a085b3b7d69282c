"""Redis for signals between processes: a client, best-effort publish, a subscription.

Redis carries no state of its own in Atelier: PostgreSQL is the source of truth, and
Redis only tells other processes, sooner than a poll would, that something committed
there (a frame to stream, a run to claim, a cancel). So every use here is built to be
lossy and to say when it was:

- `publish` never raises: a message Redis did not take returns None (and is logged);
  the subscriber finds the data in PostgreSQL on its next read.
- `Subscription` survives Redis restarts: it resubscribes with backoff by itself, and
  whenever messages may have been missed (the connection dropped, came back, or the
  reader fell behind) it hands its reader a `Gap` in the stream of `Message`s. A reader
  that gets a `Gap`, or nothing for a while (`get` returns None on its timeout), reads
  PostgreSQL instead of trusting Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

#: Seconds to open a TCP connection to Redis before giving up on that try.
CONNECT_TIMEOUT = 2.0
#: Seconds between health-check PINGs on an idle connection (a subscription's too), so a
#: dead peer is noticed even when no packet says so.
HEALTH_CHECK_INTERVAL = 5.0
#: Messages a subscription keeps for a slow reader before it drops them for one `Gap`.
MAX_QUEUED = 1000


async def stop_task(task: asyncio.Task[Any], *, every: float = 1.0) -> None:
    """Cancel a task and wait until it ended, cancelling it again while it goes on.

    A task talking to Redis can miss a cancel: when it lands while the task waits
    under `asyncio.timeout` whose deadline passes at the same moment, Python 3.11
    reports a `TimeoutError` instead, which the reconnecting loops here treat as a
    dropped connection. Cancelling again until the task ends keeps shutdown bounded.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()


def create_client(url: str) -> Redis:
    """Return a Redis client for `url` (no connection is made until first use).

    Commands retry twice with a short backoff, so a Redis restart costs a command a
    fraction of a second, not an error; after that the error surfaces.
    """
    return Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        health_check_interval=HEALTH_CHECK_INTERVAL,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2),
    )


async def ping(client: Redis) -> None:
    """Check that Redis answers (readiness); raise `RedisError` or `OSError` when not."""
    await client.ping()


async def publish(client: Redis, channel: str, data: bytes | str) -> int | None:
    """Publish a message; return how many subscribers got it, or None when Redis failed."""
    try:
        return int(await client.publish(channel, data))
    except (RedisError, OSError) as exc:
        log.warning("redis publish on %s failed: %s", channel, type(exc).__name__)
        return None


async def publish_many(client: Redis, channel: str, messages: list[str]) -> bool:
    """Publish messages in order in one round trip (a pipeline); False when Redis failed."""
    try:
        async with client.pipeline(transaction=False) as pipe:
            for data in messages:
                pipe.publish(channel, data)
            await pipe.execute()
    except (RedisError, OSError) as exc:
        log.warning("redis publish on %s failed: %s", channel, type(exc).__name__)
        return False
    return True


@dataclass(frozen=True, slots=True)
class Message:
    """One message published on a subscribed channel."""

    channel: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages may have been missed here: read the source of truth instead."""

    reason: Literal["disconnected", "reconnected", "lagged"]


class Subscription:
    """The messages of some channels, across Redis restarts (see the module docstring).

    Use as `async with Subscription(client, ["run:1"]) as sub:` and call `await
    sub.get(timeout)`. Entering returns once the first subscribe has been tried: when it
    succeeded, every message published from then on is delivered or covered by a `Gap`;
    when Redis was down, the subscription keeps trying and yields a `Gap` once it is back.
    """

    def __init__(
        self,
        client: Redis,
        channels: Sequence[str],
        *,
        max_queued: int = MAX_QUEUED,
        backoff: tuple[float, float] = (0.05, 1.0),
    ) -> None:
        """Prepare a subscription to `channels`; nothing connects before `__aenter__`."""
        if not channels:
            raise ValueError("a subscription needs at least one channel")
        self._client = client
        self._channels = list(channels)
        self._queue: asyncio.Queue[Message | Gap] = asyncio.Queue(max_queued)
        self._backoff = backoff
        self._connected = False
        self._tried = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        """Whether the subscription is live on Redis right now."""
        return self._connected

    async def __aenter__(self) -> Self:
        """Start listening; return once the first subscribe has been tried."""
        self._task = asyncio.create_task(self._listen(), name=f"redis-sub {self._channels[0]}")
        await self._tried.wait()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)

    async def get(self, timeout: float) -> Message | Gap | None:  # noqa: ASYNC109 - a poll
        """Return the next message or gap, or None when nothing came within `timeout` s."""
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None

    def _put(self, item: Message | Gap) -> None:
        if self._queue.full():  # the reader lags: one gap stands for what is dropped
            while not self._queue.empty():
                self._queue.get_nowait()
            item = Gap("lagged")
        self._queue.put_nowait(item)

    async def _on_reconnect(self, _connection: Any) -> None:
        """Called when redis-py reconnects the subscription by itself (it resubscribes)."""
        self._put(Gap("reconnected"))

    async def _listen(self) -> None:
        delay, longest = self._backoff
        missed = False  # a try failed or a connection dropped since the reader entered
        while True:
            pubsub: PubSub = self._client.pubsub()
            try:
                await self._subscribe(pubsub)
                if pubsub.connection is not None:
                    pubsub.connection.register_connect_callback(self._on_reconnect)
                self._connected = True
                if missed:
                    self._put(Gap("reconnected"))
                    log.info("redis subscription to %s is back", self._channels[0])
                missed, delay = False, self._backoff[0]
                self._tried.set()
                while True:
                    self._deliver(await pubsub.get_message(timeout=1.0))
            except (RedisError, OSError, TimeoutError) as exc:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise asyncio.CancelledError from exc  # a cancel the timeout took for its own
                if self._connected:
                    self._put(Gap("disconnected"))
                    log.warning("redis subscription to %s dropped: %s", self._channels[0], exc)
                self._connected, missed = False, True
                self._tried.set()
            finally:
                if pubsub.connection is not None:
                    pubsub.connection.deregister_connect_callback(self._on_reconnect)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, longest)

    async def _subscribe(self, pubsub: PubSub) -> None:
        """Subscribe and wait for Redis to confirm every channel.

        Sending SUBSCRIBE proves nothing: on a pooled connection whose server died the
        write still succeeds. Only the confirmations prove a live subscription.
        """
        await pubsub.subscribe(*self._channels)
        pending = set(self._channels)
        async with asyncio.timeout(CONNECT_TIMEOUT * 2):
            while pending:
                message = await pubsub.get_message(timeout=CONNECT_TIMEOUT)
                if message is not None and message["type"] == "subscribe":
                    pending.discard(_text(message["channel"]))
                else:
                    self._deliver(message)

    def _deliver(self, message: dict[str, Any] | None) -> None:
        """Queue a published message (not a subscribe confirmation or a pong)."""
        if message is not None and message["type"] == "message":
            self._put(Message(_text(message["channel"]), message["data"]))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
