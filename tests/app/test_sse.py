"""Following a run's log: replay then live, no loss or repeat, gaps, lag, heartbeats."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.sse import HEARTBEAT, follow_run, parse_cursor
from engine.hub import Hub, Subscription
from engine.protocols import EventLog
from engine.records import Frame, RunRecord, RunStatusChange, ThreadRecord, now
from engine.spec import RunOptions
from engine.sqlite import SqliteRunStorage
from tests.app.harness import read_sse


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[SqliteRunStorage, Hub]]:
    hub = Hub()
    async with SqliteRunStorage(str(tmp_path / "atelier.db"), publish=hub.publish) as store:
        stamp = now()
        await store.threads.insert(ThreadRecord("t", "o", stamp, stamp))
        run = RunRecord("r", "t", "o", "a", "pending", stamp, stamp, RunOptions(), "reject")
        await store.runs.insert(run, exclusive=True)
        hub.run_live("r")  # as the run manager does while it executes the run
        yield store, hub


@dataclass
class Frames:
    """`RunFrames` over an event log and a hub, as the run manager offers it."""

    events: EventLog
    hub: Hub

    async def read_frames(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        return await self.events.read(run_id, after, limit)

    async def last_frame_id(self, run_id: str) -> int:
        return await self.events.last_id(run_id)

    def subscribe(self, run_id: str) -> Subscription:
        return self.hub.subscribe(run_id)

    def unsubscribe(self, sub: Subscription) -> None:
        self.hub.unsubscribe(sub)

    def is_live(self, run_id: str) -> bool:
        return self.hub.is_live(run_id)


def follow(
    events: Any, hub: Hub, run_id: str, thread_id: str, **options: Any
) -> AsyncIterator[bytes]:
    """Follow a run through a log and a hub, as a stream response follows the run manager."""
    return follow_run(Frames(events, hub), run_id, thread_id, **options)


def frame(i: int, event: str = "custom") -> Frame:
    return Frame(i, event, json.dumps({"n": i}))


async def collect(stream: AsyncIterator[bytes]) -> str:
    return b"".join([chunk async for chunk in stream]).decode()


async def test_replay_then_live_gives_each_frame_once(store: tuple[SqliteRunStorage, Hub]) -> None:
    storage, hub = store
    runs = storage.events
    for i in range(1, 4):
        runs.append("r", frame(i))
    await runs.flush()
    follower = asyncio.ensure_future(collect(follow(runs, hub, "r", "t", after=1)))
    await asyncio.sleep(0.05)
    for i in range(4, 8):
        runs.append("r", frame(i))
        await asyncio.sleep(0)
    runs.append("r", frame(8, "end"))
    frames = read_sse(await asyncio.wait_for(follower, 5))
    assert [f.id for f in frames] == [2, 3, 4, 5, 6, 7, 8]
    assert frames[-1].event == "end"


async def test_a_cursor_before_the_kept_log_gets_a_gap_frame(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    storage, hub = store
    runs = storage.events
    for i, event in enumerate(["metadata", "custom", "custom", "custom", "end"], start=1):
        runs.append("r", frame(i, event))
    runs.record(RunStatusChange("r", "success"))
    await runs.flush()
    await runs.prune(finished_before="9999")
    frames = read_sse(await collect(follow(runs, hub, "r", "t", after=1)))
    assert [(f.id, f.event) for f in frames] == [(4, "gap"), (5, "end")]
    assert frames[0].data["first_missing"] == 2 and frames[0].data["last_missing"] == 4
    assert "/threads/t/state" in frames[0].data["message"]


async def test_a_cursor_at_or_past_the_end_frame_closes_at_once(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    storage, hub = store
    runs = storage.events
    for i, event in enumerate(["metadata", "custom", "end"], start=1):
        runs.append("r", frame(i, event))
    await runs.flush()
    for cursor in (3, 9):  # the client has every frame: nothing is left to wait for
        body = await asyncio.wait_for(collect(follow(runs, hub, "r", "t", after=cursor)), 2)
        assert body == ""
    frames = read_sse(await collect(follow(runs, hub, "r", "t", after=2)))
    assert [f.event for f in frames] == ["end"]
    assert hub.subscriber_count == 0


async def test_a_lagging_subscriber_catches_up_from_the_log(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    storage, _ = store
    runs = storage.events
    hub = Hub(subscriber_buffer=3)
    runs._publish = hub.publish  # this test's hub, with a tiny buffer
    hub.run_live("r")
    stream = follow(runs, hub, "r", "t")
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.05)
    for i in range(1, 21):  # far more than the subscriber's buffer, in one batch
        runs.append("r", frame(i))
    runs.append("r", frame(21, "end"))
    body = (await asyncio.wait_for(first, 5)) + "".join([c.decode() async for c in stream]).encode()
    assert [f.id for f in read_sse(body.decode())] == list(range(1, 22))


async def test_a_subscription_over_its_buffer_is_marked_lagged() -> None:
    sub = Subscription("r", limit=3)
    sub.push([frame(1), frame(2)])
    sub.push([frame(3), frame(4)])
    assert sub.lagged
    assert await sub.next_batch(1) == []  # nothing buffered: re-read the log
    sub.caught_up()
    sub.push([frame(5)])
    assert [f.id for f in await sub.next_batch(1) or []] == [5]


async def test_idle_streams_send_heartbeats(store: tuple[SqliteRunStorage, Hub]) -> None:
    storage, hub = store
    runs = storage.events
    stream = follow(runs, hub, "r", "t", heartbeat=0.05)
    assert await asyncio.wait_for(stream.__anext__(), 2) == HEARTBEAT
    runs.append("r", frame(1, "end"))
    rest = [chunk async for chunk in stream]
    assert rest[-1].startswith(b"id: 1\nevent: end\n")
    assert hub.subscriber_count == 0


async def test_only_the_wanted_modes_pass_but_control_frames_always_do(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    storage, hub = store
    runs = storage.events
    for i, event in enumerate(["metadata", "updates", "custom|executor:1", "values", "end"], 1):
        runs.append("r", frame(i, event))
    await runs.flush()
    body = await collect(follow(runs, hub, "r", "t", modes=["custom"]))
    assert [f.event for f in read_sse(body)] == ["metadata", "custom|executor:1", "end"]


@pytest.mark.parametrize(
    ("header", "query", "cursor"),
    [
        (None, None, 0),
        ("", "7", 7),
        ("12", "7", 12),
        (" 3 ", None, 3),
        ("-1", None, 0),
        (None, "-1", 0),
    ],
)
def test_cursor_from_header_or_query(header: str | None, query: str | None, cursor: int) -> None:
    assert parse_cursor(header, query) == cursor


@pytest.mark.parametrize("bad", ["-2", "abc", "1.5", "9" * 19])
def test_a_cursor_must_be_a_frame_id(bad: str) -> None:
    with pytest.raises(ValueError, match="Last-Event-ID"):
        parse_cursor(bad, None)


async def test_a_stream_of_a_run_no_longer_executed_is_told_it_stalled_and_closed(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    # Regression: a run whose first commit failed was never executed again, and its
    # stream heartbeated forever. Heartbeats now only cover a run that is alive.
    storage, hub = store
    runs = storage.events
    runs.append("r", frame(1, "metadata"))
    await runs.flush()
    stream = follow(runs, hub, "r", "t", heartbeat=0.05)
    assert (await asyncio.wait_for(stream.__anext__(), 2)).startswith(b"id: 1\n")
    assert await asyncio.wait_for(stream.__anext__(), 2) == HEARTBEAT  # alive, quiet
    hub.run_gone("r")  # the run manager stopped executing it without an end
    rest = b"".join([chunk async for chunk in stream])
    notice = rest.split(HEARTBEAT)[-1].decode()
    assert notice.startswith("event: error\n") and "id:" not in notice
    assert json.loads(notice.split("data: ", 1)[1])["error"] == "RunStalled"
    assert hub.subscriber_count == 0


async def test_a_run_that_ends_as_it_stops_being_executed_delivers_its_end(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    storage, hub = store
    runs = storage.events
    follower = asyncio.ensure_future(collect(follow(runs, hub, "r", "t", heartbeat=5)))
    await asyncio.sleep(0.05)
    runs.append("r", frame(1, "metadata"))
    runs.append("r", frame(2, "end"))
    await runs.flush()
    hub.run_gone("r")
    frames = read_sse(await asyncio.wait_for(follower, 2))
    assert [(f.id, f.event) for f in frames] == [(1, "metadata"), (2, "end")]


async def test_live_frames_that_skip_ids_send_the_follower_back_to_the_log(
    store: tuple[SqliteRunStorage, Hub],
) -> None:
    # A live fan-out that loses a message (Redis) must not turn into a `gap` frame:
    # the frames are in the log, so the follower reads them there.
    storage, _ = store
    runs = storage.events
    hub = Hub()
    runs._publish = lambda _run, _frames: None  # nothing reaches the hub by itself
    hub.run_live("r")
    follower = asyncio.ensure_future(collect(follow(runs, hub, "r", "t")))
    await asyncio.sleep(0.05)
    for i in range(1, 4):
        runs.append("r", frame(i, "end" if i == 3 else "custom"))
    await runs.flush()
    hub.publish("r", [frame(3, "end")])  # frames 1 and 2 were lost on the way
    frames = read_sse(await asyncio.wait_for(follower, 5))
    assert [(f.id, f.event) for f in frames] == [(1, "custom"), (2, "custom"), (3, "end")]


class FlakyLog:
    """An event log whose reads fail while `down` (a database briefly unreachable)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.down = True
        self.failed = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def read(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        if self.down:
            self.failed += 1
            raise ConnectionError("the database is away")
        return await self.inner.read(run_id, after, limit)  # type: ignore[attr-defined]


async def test_a_log_read_that_fails_for_a_while_keeps_the_stream_with_heartbeats(
    store: tuple[SqliteRunStorage, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("engine.follow.READ_RETRY_EVERY", 0.02)
    storage, hub = store
    storage.events.append("r", frame(1, "metadata"))
    await storage.events.flush()
    flaky = FlakyLog(storage.events)
    stream = follow(flaky, hub, "r", "t", heartbeat=5)
    assert await asyncio.wait_for(stream.__anext__(), 2) == HEARTBEAT  # waiting, not broken
    assert await asyncio.wait_for(stream.__anext__(), 2) == HEARTBEAT
    flaky.down = False  # the database is back
    assert (await asyncio.wait_for(stream.__anext__(), 2)).startswith(b"id: 1\n")
    storage.events.append("r", frame(2, "end"))
    rest = read_sse(b"".join([chunk async for chunk in stream]).decode())
    assert [(f.id, f.event) for f in rest] == [(2, "end")]
    assert flaky.failed >= 2


async def test_a_log_that_stays_unreadable_gets_a_notice_without_an_id_and_closes(
    store: tuple[SqliteRunStorage, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("engine.follow.READ_RETRY_EVERY", 0.02)
    monkeypatch.setattr("engine.follow.READ_RETRY_FOR", 0.2)
    storage, hub = store
    flaky = FlakyLog(storage.events)
    body = await asyncio.wait_for(
        collect(follow(flaky, hub, "r", "t", after=3, heartbeat=5)),
        5,
    )
    notice = body.split(HEARTBEAT.decode())[-1]
    assert notice.startswith("event: error\n") and "id:" not in notice
    data = json.loads(notice.split("data: ", 1)[1])
    assert data["error"] == "StreamUnavailable" and "Last-Event-ID: 3" in data["message"]
    assert hub.subscriber_count == 0
