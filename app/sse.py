"""Server-Sent Events: responses that follow a run's event log, never run the graph.

`follow_run` is the body of every stream response: it follows the run through the
run manager (`engine.protocols.RunFrames`), subscribing to its live frames first,
then it replays the durable log after the client's cursor, then sends
live frames as they are committed (deduplicated by id, so the switch from replay to
live neither drops nor repeats a frame), with a `: heartbeat` comment whenever the
stream has been idle for SSE_HEARTBEAT_INTERVAL. It ends after the `end` frame. A
cursor older than what the log keeps gets a `gap` frame first. Live frames that do
not continue from the last id sent (a message the live fan-out lost) send the
stream back to the log, so only a pruned log ever yields a `gap`.

Heartbeats never hide a dead run: a follower sends one only while this process
executes the run (`RunFrames.is_live`). When the run is not executed here and its log
holds no `end` — its storage failed and it waits for the recovery sweep — the
stream gets a `stalled` `error` frame *without an id* (so the client's
`Last-Event-ID` still names the last real frame) and is closed; the client may
rejoin later and continue where it was.

A read of the log that fails (the database is briefly unreachable) does not break the
stream: the follower heartbeats and reads again every `READ_RETRY_EVERY` seconds, for
up to `READ_RETRY_FOR` seconds; only then does it send an `unreadable` `error` frame
without an id (rejoin later with `Last-Event-ID`) and close.

`DisconnectAwareResponse` streams a body while listening for the client's
disconnect, and calls a callback when the client went away (not when the server is
shutting down), which is how `on_disconnect=cancel` cancels a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engine.frames import CONTROL_EVENTS, graph_mode
from engine.protocols import RunFrames
from engine.records import Frame
from engine.serde import dumps

log = logging.getLogger(__name__)

T = TypeVar("T")

HEARTBEAT = b": heartbeat\n\n"
#: Seconds a follower keeps retrying a log read that fails before it gives up.
READ_RETRY_FOR = 30.0
#: Seconds between two tries of a log read that failed.
READ_RETRY_EVERY = 1.0
SSE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
}


class DisconnectAwareResponse(StreamingResponse):
    """A streaming response that tells `on_disconnect` when the client goes away."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        status_code: int = 200,
        *,
        on_disconnect: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """Stream `content`; `on_disconnect` runs if the client disconnects before its end."""
        super().__init__(content, status_code, **kwargs)
        self.on_disconnect = on_disconnect
        self._finished = False

    async def stream_response(self, send: Send) -> None:
        """Send the headers and the body, and note when the body is exhausted."""
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        self._finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream until the body ends or the client disconnects, whichever comes first."""
        disconnected = False

        async def listen() -> None:
            nonlocal disconnected
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected = not self._finished
                    return

        async def stream() -> None:
            nonlocal disconnected
            try:
                await self.stream_response(send)
            except OSError:
                disconnected = True

        try:
            async with anyio.create_task_group() as group:

                async def until_first_done(job: Callable[[], Any]) -> None:
                    await job()
                    group.cancel_scope.cancel()

                group.start_soon(until_first_done, stream)
                group.start_soon(until_first_done, listen)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        if disconnected and self.on_disconnect is not None:
            self.on_disconnect()


def stalled_notice(run_id: str, thread_id: str, last: int) -> bytes:
    """Return the `error` frame (no id) telling a follower that the run cannot progress now."""
    data = {
        "error": "RunStalled",
        "message": f"run {run_id} is not progressing on this server (its events could not "
        "be saved); it is resumed when storage recovers. Rejoin "
        f"/threads/{thread_id}/runs/{run_id}/stream with Last-Event-ID: {last} later.",
    }
    return f"event: error\ndata: {dumps(data)}\n\n".encode()


def unreadable_notice(run_id: str, thread_id: str, last: int) -> bytes:
    """Return the `error` frame (no id) telling a follower the log cannot be read now."""
    data = {
        "error": "StreamUnavailable",
        "message": f"the events of run {run_id} cannot be read right now (the database is "
        f"unavailable); the run itself is not affected. Rejoin "
        f"/threads/{thread_id}/runs/{run_id}/stream with Last-Event-ID: {last} later.",
    }
    return f"event: error\ndata: {dumps(data)}\n\n".encode()


async def _attempt(read: Awaitable[T], run_id: str) -> tuple[bool, T | None]:
    """Await a log read; (False, None) when it failed (logged), else (True, its value)."""
    try:
        return True, await read
    except Exception as exc:  # the driver's error: the database is away, try again later
        log.warning("reading the log of run %s failed: %s", run_id, type(exc).__name__)
        return False, None


def gap_frame(first_missing: int, last_missing: int, thread_id: str) -> Frame:
    """Return the frame standing for log frames that are no longer kept."""
    data = {
        "first_missing": first_missing,
        "last_missing": last_missing,
        "message": f"frames {first_missing}-{last_missing} of this run are no longer kept; "
        f"re-read the thread state at /threads/{thread_id}/state",
    }
    return Frame(last_missing, "gap", dumps(data))


async def follow_run(
    frames: RunFrames,
    run_id: str,
    thread_id: str,
    *,
    after: int = 0,
    modes: Collection[str] | None = None,
    heartbeat: float = 15.0,
    on_open: Callable[[], None] | None = None,
    on_close: Callable[[], None] | None = None,
) -> AsyncIterator[bytes]:
    """Yield a run's frames after id `after` as SSE bytes, live until its `end` frame.

    Args:
        frames: The run's committed frames, from its durable log and live (the run
            manager).
        run_id: The run to follow.
        thread_id: Its thread (named in `gap` frames).
        after: The client's cursor: the id of the last frame it has (0: everything).
        modes: Client stream modes to keep (None keeps all); control frames always pass.
        heartbeat: Seconds of silence before a `: heartbeat` comment.
        on_open: Called once when following starts (metrics).
        on_close: Called once when following stops, however it stops (metrics).
    """
    wanted = None if modes is None else {graph_mode(m) for m in modes} | CONTROL_EVENTS
    last = after
    ended = False
    sub = frames.subscribe(run_id)
    if on_open is not None:
        on_open()

    def render(batch: list[Frame]) -> bytes:
        nonlocal last, ended
        out: list[bytes] = []
        for frame in batch:
            if frame.id <= last or ended:
                continue
            if frame.id > last + 1:
                out.append(gap_frame(last + 1, frame.id - 1, thread_id).encode())
            last = frame.id
            if wanted is None or frame.mode in wanted:
                out.append(frame.encode())
            ended = frame.event == "end"
        return b"".join(out)

    async def final_frames() -> list[Frame]:
        return await frames.read_frames(run_id, await frames.last_frame_id(run_id) - 1)

    failing_since: float | None = None
    try:
        if after > 0:
            # A client that already has the run's `end` frame gets nothing more: close
            # now rather than heartbeat forever for frames that will never come. (When
            # the log cannot be read now, the replay below finds out instead.)
            _ok, final = await _attempt(final_frames(), run_id)
            ended = bool(final and final[-1].event == "end" and final[-1].id <= after)
        while not ended:
            # A run that stops being executed here commits its `end` first, so a log
            # read after seeing it gone has the `end` if there is one.
            live = frames.is_live(run_id)
            # Replay what the log holds after the cursor (first, after lagging, and
            # whenever the run may have stopped).
            while not ended:
                ok, read = await _attempt(frames.read_frames(run_id, last), run_id)
                if not ok:
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since >= READ_RETRY_FOR:
                        yield unreadable_notice(run_id, thread_id, last)
                        return
                    yield HEARTBEAT
                    await asyncio.sleep(READ_RETRY_EVERY)
                    continue
                failing_since = None
                if not read:
                    break
                if chunk := render(read):
                    yield chunk
            if ended:
                break
            if not live:
                yield stalled_notice(run_id, thread_id, last)
                return
            # Then live frames, as they are committed.
            while not ended:
                batch = await sub.next_batch(heartbeat)
                if batch is None:
                    if not frames.is_live(run_id):
                        break  # quiet because it is dead: re-read the log, then say so
                    yield HEARTBEAT
                    continue
                if sub.lagged:
                    sub.caught_up()
                    break  # back to the log for what was dropped
                if not batch:
                    break  # woken without frames: the run stopped here, or live frames
                    # may be missing (Redis dropped): re-check it in the log
                fresh = [frame for frame in batch if frame.id > last]
                if fresh and fresh[0].id > last + 1:
                    break  # live frames skipped some (a lost message): the log has them
                if chunk := render(batch):
                    yield chunk
    finally:
        frames.unsubscribe(sub)
        if on_close is not None:
            on_close()


def parse_cursor(header: str | None, query: str | None) -> int:
    """Return the client's cursor from `Last-Event-ID` or `?last_event_id=` (0: none).

    `-1` means "from the first frame", like no cursor (PRODUCT.md; the official
    `useStream` sends it to replay a run from its start).

    Raises:
        ValueError: The cursor is not a frame id (a non-negative integer) or -1.
    """
    raw = header if header not in (None, "") else query
    if raw in (None, ""):
        return 0
    assert raw is not None
    value = raw.strip()
    if value == "-1":  # useStream's "from the first frame" (joinStream's default)
        return 0
    if not value.isdigit() or len(value) > 18:
        raise ValueError("Last-Event-ID must be the id of a frame (a non-negative integer) or -1")
    return int(value)
