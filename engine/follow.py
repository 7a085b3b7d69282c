"""Follow a run's committed frames: the durable log first, then live, up to its `end`.

`follow_frames` is what every reader of a run's stream runs — the SSE responses
(`app.sse.follow_run` renders it as bytes), `atelier run`, A2A tasks and MCP tool
calls — so they all see the same frames in the same order:

- It subscribes to the run's live frames first, then replays the durable log after
  the reader's cursor, then yields live frames as they are committed (deduplicated
  by id, so the switch from replay to live neither drops nor repeats a frame). A
  cursor older than what the log keeps gets a `gap` frame first. Live frames that do
  not continue from the last id yielded (a message the live fan-out lost) send the
  follower back to the log, so only a pruned log ever yields a `gap`.
- Whenever nothing came for `idle` seconds while the run is executed (`is_live`), or
  while a failed log read is retried, it yields `IDLE` (an SSE response sends a
  heartbeat comment then).
- It never waits on a dead run: when the run is not executed and its log holds no
  `end` (its storage failed and it waits for the recovery sweep), it yields
  `Stopped("stalled", last)` and ends; when the log cannot be read for
  `READ_RETRY_FOR` seconds, `Stopped("unreadable", last)`. The reader may follow
  again later from `last`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass
from typing import Literal, TypeVar

from engine.protocols import RunFrames
from engine.records import Frame
from engine.serde import dumps

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a follower keeps retrying a log read that fails before it gives up.
READ_RETRY_FOR = 30.0
#: Seconds between two tries of a log read that failed.
READ_RETRY_EVERY = 1.0


class Idle:
    """Nothing to yield for a while; the run goes on (a reader may send a keep-alive)."""

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


@dataclass(frozen=True)
class Stopped:
    """The follower gives up for now; the run may still end later (follow again from `last`)."""

    #: `stalled`: the run is not executed and its log has no `end` (storage failed);
    #: `unreadable`: the log could not be read for READ_RETRY_FOR seconds.
    reason: Literal["stalled", "unreadable"]
    #: The id of the last frame yielded (or the cursor, when none was).
    last: int


def gap_frame(first_missing: int, last_missing: int, thread_id: str) -> Frame:
    """Return the frame standing for log frames that are no longer kept."""
    data = {
        "first_missing": first_missing,
        "last_missing": last_missing,
        "message": f"frames {first_missing}-{last_missing} of this run are no longer kept; "
        f"re-read the thread state at /threads/{thread_id}/state",
    }
    return Frame(last_missing, "gap", dumps(data))


async def _attempt(read: Awaitable[T], run_id: str) -> tuple[bool, T | None]:
    """Await a log read; (False, None) when it failed (logged), else (True, its value)."""
    try:
        return True, await read
    except Exception as exc:  # the driver's error: the database is away, try again later
        log.warning("reading the log of run %s failed: %s", run_id, type(exc).__name__)
        return False, None


async def follow_frames(
    frames: RunFrames,
    run_id: str,
    thread_id: str,
    *,
    after: int = 0,
    idle: float = 15.0,
) -> AsyncGenerator[Frame | Idle | Stopped, None]:
    """Yield a run's frames after id `after`, live until its `end` frame (see the module).

    Args:
        frames: The run's committed frames, from its durable log and live (the run
            manager).
        run_id: The run to follow.
        thread_id: Its thread (named in `gap` frames).
        after: The reader's cursor: the id of the last frame it has (0: everything).
        idle: Seconds of silence before `IDLE` is yielded.
    """
    last = after
    ended = False
    sub = frames.subscribe(run_id)

    def fresh(batch: list[Frame]) -> list[Frame]:
        nonlocal last, ended
        out: list[Frame] = []
        for frame in batch:
            if frame.id <= last or ended:
                continue
            if frame.id > last + 1:
                out.append(gap_frame(last + 1, frame.id - 1, thread_id))
            last = frame.id
            out.append(frame)
            ended = frame.event == "end"
        return out

    async def final_frames() -> list[Frame]:
        return await frames.read_frames(run_id, await frames.last_frame_id(run_id) - 1)

    failing_since: float | None = None
    try:
        if after > 0:
            # A reader that already has the run's `end` frame gets nothing more: stop
            # now rather than idle forever for frames that will never come. (When the
            # log cannot be read now, the replay below finds out instead.)
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
                        yield Stopped("unreadable", last)
                        return
                    yield IDLE
                    await asyncio.sleep(READ_RETRY_EVERY)
                    continue
                failing_since = None
                if not read:
                    break
                for frame in fresh(read):
                    yield frame
            if ended:
                break
            if not live:
                yield Stopped("stalled", last)
                return
            # Then live frames, as they are committed.
            while not ended:
                batch = await sub.next_batch(idle)
                if batch is None:
                    if not frames.is_live(run_id):
                        break  # quiet because it is dead: re-read the log, then say so
                    yield IDLE
                    continue
                if sub.lagged:
                    sub.caught_up()
                    break  # back to the log for what was dropped
                if not batch:
                    break  # woken without frames: the run stopped here, or live frames
                    # may be missing (Redis dropped): re-check it in the log
                new = [frame for frame in batch if frame.id > last]
                if new and new[0].id > last + 1:
                    break  # live frames skipped some (a lost message): the log has them
                for frame in fresh(batch):
                    yield frame
    finally:
        frames.unsubscribe(sub)
