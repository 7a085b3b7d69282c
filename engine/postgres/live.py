"""Live frames across processes over Redis (`LiveFrames`), with PostgreSQL as the fallback.

Every process has one `RedisLiveFrames`: a local `Hub` that its SSE responses
subscribe to, plus one Redis subscription to the frames channel that feeds the hub
with the frames every other process committed. `publish` (called by the event log
after a commit) hands the frames to the local hub at once and queues them for Redis,
where one publisher task sends them in commit order.

Redis is only the fast path. When its subscription drops, comes back or lags
(`engine.postgres.redis_pubsub.Gap`), every local follower is woken to re-read the log from
PostgreSQL after the last id it sent, and while Redis is away they are woken every
`poll` seconds to do so; `app.sse.follow_run` also goes back to the log whenever a
live batch does not continue from the last id it sent. So losing Redis mid-stream
slows a stream down to polling but loses no frame.

Without `REDIS_URL` (a client of None) there is no fast path at all: followers re-read
PostgreSQL every `poll` seconds, and frames of runs executed here still reach this
process's followers at once.

`is_live` answers True for every run: in the scale-out deployment a pending or
running run is always executed by some worker eventually (a dead worker's lease is
swept), so a quiet run is never a dead one and its followers keep waiting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable

from redis.asyncio import Redis

from engine.hub import Hub, Subscription
from engine.postgres import redis_pubsub as redis_signals
from engine.records import Frame

log = logging.getLogger(__name__)

#: The channel every process publishes committed frames on.
FRAMES_CHANNEL = "atelier:frames"
#: Seconds between log re-reads of the followers while Redis is away.
POLL_INTERVAL = 0.5
#: Frame batches queued for Redis before the oldest are dropped (followers re-read).
MAX_OUTBOX = 10_000
#: Frame batches sent to Redis in one round trip (a pipeline) at most.
MAX_PUBLISH = 256


def encode(origin: str, run_id: str, frames: list[Frame]) -> str:
    """Return the message that carries a run's committed frames, sent by process `origin`."""
    return json.dumps(
        {"from": origin, "run": run_id, "frames": [[f.id, f.event, f.data] for f in frames]}
    )


def decode(data: bytes) -> tuple[str, str, list[Frame]]:
    """Return the sending process, the run id and the frames a message carries."""
    message = json.loads(data)
    frames = [Frame(int(i), str(e), str(d)) for i, e, d in message["frames"]]
    return str(message["from"]), str(message["run"]), frames


class RedisLiveFrames:
    """Committed frames of every process's runs, fanned out to this process's followers."""

    def __init__(
        self,
        client: Redis | None,
        *,
        channel: str = FRAMES_CHANNEL,
        poll: float = POLL_INTERVAL,
        on_fallback: Callable[[], None] | None = None,
        follow: bool = True,
    ) -> None:
        """Bind to a Redis client; `start()` subscribes.

        Args:
            client: The process's Redis client (None: poll PostgreSQL only).
            channel: The frames channel.
            poll: Seconds between followers' log re-reads while Redis is away.
            on_fallback: Called each time followers are sent back to PostgreSQL
                because Redis dropped or lagged (metrics).
            follow: Whether this process serves streams and so needs the other
                processes' frames. False (`atelier worker`, which serves none): it
                only publishes, and never receives or decodes every run's frames.
        """
        self.hub = Hub()
        self.origin = uuid.uuid4().hex  # this process, to skip its own messages
        self._client = client
        self._channel = channel
        self._poll = poll
        self._on_fallback = on_fallback
        self._follow = follow
        self._outbox: asyncio.Queue[tuple[str, list[Frame]]] = asyncio.Queue(MAX_OUTBOX)
        self._tasks: list[asyncio.Task[None]] = []
        self._subscription: redis_signals.Subscription | None = None

    async def start(self) -> None:
        """Subscribe to the frames channel (when following) and start the publisher."""
        if self._client is None:
            if self._follow:
                self._tasks = [asyncio.create_task(self._poll_only(), name="live-frames-poll")]
            return
        self._tasks = [asyncio.create_task(self._send(), name="live-frames-publish")]
        if self._follow:
            self._subscription = redis_signals.Subscription(self._client, [self._channel])
            await self._subscription.__aenter__()
            self._tasks.append(
                asyncio.create_task(self._listen(self._subscription), name="live-frames-listen")
            )

    async def close(self) -> None:
        """Stop listening and publishing; idempotent."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await redis_signals.stop_task(task)
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.__aexit__(None, None, None)

    @property
    def connected(self) -> bool:
        """Whether frames from other processes arrive through Redis right now."""
        return self._subscription is not None and self._subscription.connected

    # -- LiveFrames ------------------------------------------------------------------

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run; frames committed from now on are fed to the subscription."""
        return self.hub.subscribe(run_id)

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; idempotent."""
        self.hub.unsubscribe(sub)

    def publish(self, run_id: str, frames: list[Frame]) -> None:
        """Feed committed frames to local followers now and to other processes via Redis."""
        self.hub.publish(run_id, frames)
        if self._client is None:
            return
        if self._outbox.full():  # Redis is far behind: the oldest go, followers re-read
            self._outbox.get_nowait()
        self._outbox.put_nowait((run_id, frames))

    def is_live(self, run_id: str) -> bool:
        """Always True: an active run is executed by some worker eventually (see above)."""
        return True

    def run_live(self, run_id: str) -> None:
        """Note that this process executes the run (its followers are the hub's)."""
        self.hub.run_live(run_id)

    def run_gone(self, run_id: str) -> None:
        """Note that this process stopped executing the run, and wake its local followers."""
        self.hub.run_gone(run_id)

    @property
    def subscriber_count(self) -> int:
        """Number of live subscriptions in this process."""
        return self.hub.subscriber_count

    # -- tasks -----------------------------------------------------------------------

    async def _poll_only(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            self.hub.poke_all()

    async def _send(self) -> None:
        """Publish queued batches in commit order, all that are waiting in one round trip."""
        assert self._client is not None
        while True:
            batches = [await self._outbox.get()]
            while len(batches) < MAX_PUBLISH and not self._outbox.empty():
                batches.append(self._outbox.get_nowait())
            await redis_signals.publish_many(
                self._client,
                self._channel,
                [encode(self.origin, run_id, frames) for run_id, frames in batches],
            )

    async def _listen(self, subscription: redis_signals.Subscription) -> None:
        while True:
            item = await subscription.get(self._poll)
            if isinstance(item, redis_signals.Message):
                try:
                    origin, run_id, frames = decode(item.data)
                except (ValueError, KeyError, TypeError):
                    log.warning("ignoring a malformed message on %s", self._channel)
                    continue
                if origin != self.origin:  # this process's frames reached its hub already
                    self.hub.publish(run_id, frames)
                continue
            if isinstance(item, redis_signals.Gap) or not subscription.connected:
                # Messages may be missing: every follower re-reads PostgreSQL.
                self.hub.poke_all()
                if self._on_fallback is not None and self.hub.subscriber_count:
                    self._on_fallback()
