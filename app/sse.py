"""Server-Sent Events: responses that follow a run's event log, never run the graph.

`follow_run` is the body of every stream response. It renders what
`engine.follow.follow_frames` yields (the run's durable log after the client's
cursor, then live frames as they are committed, deduplicated by id, with a `gap`
frame for frames the log no longer keeps) as SSE bytes, keeping the client's stream
modes, with a `: heartbeat` comment whenever the stream has been idle for
SSE_HEARTBEAT_INTERVAL. It ends after the `end` frame.

Heartbeats never hide a dead run: a follower sends one only while the run is
executed. When the run is not executed and its log holds no `end` — its storage
failed and it waits for the recovery sweep — the stream gets a `stalled` `error`
frame *without an id* (so the client's `Last-Event-ID` still names the last real
frame) and is closed; the client may rejoin later and continue where it was. A log
that cannot be read for `engine.follow.READ_RETRY_FOR` seconds (heartbeats meanwhile)
ends the stream the same way, with an `unreadable` `error` frame.

`DisconnectAwareResponse` streams a body while listening for the client's
disconnect, and calls a callback when the client went away (not when the server is
shutting down), which is how `on_disconnect=cancel` cancels a run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engine import CONTROL_EVENTS, Idle, RunFrames, Stopped, dumps, follow_frames, graph_mode

log = logging.getLogger(__name__)

T = TypeVar("T")

HEARTBEAT = b": heartbeat\n\n"
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
    followed = follow_frames(frames, run_id, thread_id, after=after, idle=heartbeat)
    if on_open is not None:
        on_open()
    try:
        async with contextlib.aclosing(followed):
            async for item in followed:
                if isinstance(item, Idle):
                    yield HEARTBEAT
                elif isinstance(item, Stopped):
                    notice = stalled_notice if item.reason == "stalled" else unreadable_notice
                    yield notice(run_id, thread_id, item.last)
                elif wanted is None or item.mode in wanted:
                    yield item.encode()
    finally:
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
