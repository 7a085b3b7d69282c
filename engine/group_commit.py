"""Group-committed event logs: the queueing every backend's `EventLog` shares.

`append` queues a frame and returns at once; a writer task commits everything
queued so far in one transaction and only then hands the frames to `publish`
(the live fan-out), so a subscriber never sees a frame that a crash could take
back, and a rejoin after a restart continues with the next durable id. Run-status
and thread-state changes queued with `record` commit in the same transaction,
after the frames queued before them. A batch that fails with a transient error is
retried with backoff (a locked or full database, a dropped connection often comes
back); one that still fails is split by run, so only the runs whose own writes
fail are *lost*: their queued frames are dropped (never half-written, never
published), `flush(run_id)` raises `StoreError`, and the `on_lost` callback tells
the executor, which ends the run loudly from its first lost frame id (`reopen`) or
leaves it for recovery. Nothing is counted committed that was not.

A backend subclasses `GroupCommitEventLog` with how a batch is written
(`_commit`, in queue order with `write_in_order`), which failures are worth
retrying (`_retryable`), and its reads (`read`, `last_id`, `prune`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engine.protocols import Publish, StoreError
from engine.records import Frame, RecordChange

log = logging.getLogger(__name__)

#: Seconds the event writer keeps retrying a batch that fails before giving its runs up.
RETRY_FOR = 10.0


@dataclass(frozen=True, slots=True)
class QueuedWrite:
    """One queued write: a frame or a record change, of a run (None: of no run)."""

    run_id: str | None
    generation: int
    frame: Frame | None = None
    change: RecordChange | None = None


#: A frame as a row of the event log: run id, frame id, event, data.
FrameRow = tuple[str, int, str, str]


async def write_in_order(
    items: list[QueuedWrite],
    insert_frames: Callable[[list[FrameRow]], Awaitable[object]],
    apply: Callable[[RecordChange], Awaitable[object]],
) -> None:
    """Write a batch in queue order: a run's frames before the changes queued after them.

    Args:
        items: The batch.
        insert_frames: Inserts consecutive frames (one statement for them all).
        apply: Writes one record change.
    """
    rows: list[FrameRow] = []
    for item in items:
        if item.frame is not None:
            assert item.run_id is not None
            rows.append((item.run_id, item.frame.id, item.frame.event, item.frame.data))
            continue
        if rows:
            await insert_frames(rows)
            rows = []
        assert item.change is not None
        await apply(item.change)
    if rows:
        await insert_frames(rows)


class GroupCommitEventLog:
    """An event log whose appends are group-committed (see the module docstring).

    `start()` starts the writer task; `close()` commits what is queued and stops it.
    `publish(run_id, frames)` is called with every committed batch of a run's frames,
    in id order.
    """

    def __init__(self, publish: Publish | None = None, *, retry_for: float = RETRY_FOR) -> None:
        """Bind the log to the live fan-out.

        Args:
            publish: Called with every committed batch of a run's frames.
            retry_for: Seconds the writer retries a failing batch before the runs it
                carries are lost.
        """
        self._publish = publish or (lambda _run_id, _frames: None)
        self.retry_for = retry_for
        #: Called with a run id when the run's queued writes are lost (see `reopen`).
        self.on_lost: Callable[[str], None] | None = None
        self._pending: list[QueuedWrite] = []
        self._queued = 0  # items queued since open
        self._resolved = 0  # of those, how many are committed or given up
        self._lost: dict[str, int | None] = {}  # run → its first frame id not durable (if any)
        self._generation: dict[str, int] = {}  # run → bumped by `reopen`
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    # -- what a backend provides ---------------------------------------------------

    async def _commit(self, items: list[QueuedWrite]) -> None:
        """Write items in one transaction, in queue order; raise when nothing was written."""
        raise NotImplementedError

    def _retryable(self, error: BaseException) -> bool:
        """Whether a failed commit may pass when tried again (locked, disconnected)."""
        raise NotImplementedError

    @property
    def close_timeout(self) -> float:
        """Seconds `close` waits for what is queued to commit."""
        return self.retry_for + 1

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_loop(), name="run-events-writer")

    async def close(self) -> None:
        """Commit what is queued (within a bound) and stop the writer; idempotent."""
        if self._writer is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.close_timeout):
                await self.flush()
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        self._writer = None

    # -- appending -----------------------------------------------------------------

    def append(self, run_id: str, frame: Frame) -> None:
        """Queue a frame for the run's log; it is committed, then published, shortly."""
        self._queue(QueuedWrite(run_id, self._generation.get(run_id, 0), frame=frame))

    def record(self, change: RecordChange, *, run_id: str | None = None) -> None:
        """Queue a change to commit with the next batch of frames (after them).

        Args:
            change: The run-status or thread-state change.
            run_id: The run it records (its fate follows the run's frames: a lost run's
                change is dropped with them); None for a change of no run.
        """
        generation = self._generation.get(run_id, 0) if run_id is not None else 0
        self._queue(QueuedWrite(run_id, generation, change=change))

    def _queue(self, item: QueuedWrite) -> None:
        self._pending.append(item)
        self._queued += 1
        self._wake.set()

    async def flush(self, run_id: str | None = None) -> None:
        """Wait until everything queued so far is committed (or given up).

        Args:
            run_id: Raise `StoreError` if this run's writes were lost (see `reopen`).
        """
        target = self._queued
        if self._resolved < target:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((target, future))
            await future
        if run_id is not None and run_id in self._lost:
            raise StoreError(f"the event log of run {run_id} could not be written")

    def is_lost(self, run_id: str) -> bool:
        """Whether the run's queued writes were given up (and it was not reopened since)."""
        return run_id in self._lost

    def reopen(self, run_id: str) -> int | None:
        """Accept a lost run's writes again; return its first frame id that is not durable.

        Everything the run queued before this call is dropped unwritten (those frames
        were never published), so the run's log holds exactly its frames below the
        returned id and the caller continues from there without a gap.

        Returns:
            The first lost frame id, or None when the run was not lost.
        """
        if run_id not in self._lost:
            return None
        self._generation[run_id] = self._generation.get(run_id, 0) + 1
        return self._lost.pop(run_id)

    def _live(self, item: QueuedWrite) -> bool:
        """Whether a queued item is still to be written (its run was not lost since).

        A dropped frame of a run that is lost now counts towards its first lost id.
        """
        run_id = item.run_id
        if run_id is None:
            return True
        if item.generation != self._generation.get(run_id, 0):
            return False  # queued before `reopen`: the run continues from its first lost id
        if run_id not in self._lost:
            return True
        self._note_lost(run_id, item)
        return False

    def _note_lost(self, run_id: str, item: QueuedWrite) -> None:
        if item.frame is not None:
            first = self._lost.get(run_id)
            self._lost[run_id] = item.frame.id if first is None else min(first, item.frame.id)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            try:
                await self._write_batch(batch)
            except Exception:  # a bug here must not stop the log: give the batch up loudly
                log.exception("the event writer failed on a batch of %d write(s)", len(batch))
                for run_id in {item.run_id for item in batch if item.run_id is not None}:
                    self._lose(run_id, [i for i in batch if i.run_id == run_id])
            self._resolved += len(batch)
            self._wake_waiters()

    async def _write_batch(self, batch: list[QueuedWrite]) -> None:
        """Commit a batch (retrying), or split it by run and give up the runs that fail."""
        items = [item for item in batch if self._live(item)]
        if not items:
            return
        error = await self._commit_retrying(items)
        if error is None:
            self._publish_items(items)
            return
        groups: dict[str | None, list[QueuedWrite]] = {}
        for item in items:
            groups.setdefault(item.run_id, []).append(item)
        if len(groups) == 1:
            run_id, failed = next(iter(groups.items()))
            self._give_up(run_id, failed, error)
            return
        for run_id, group in groups.items():  # one run's bad write must not sink the others
            group_error = await self._commit_once(group)
            if group_error is None:
                self._publish_items(group)
            else:
                self._give_up(run_id, group, group_error)

    async def _commit_retrying(self, items: list[QueuedWrite]) -> BaseException | None:
        """Commit items in one transaction, retrying with backoff for `retry_for` seconds."""
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            error = await self._commit_once(items)
            if error is None:
                return None
            if not self._retryable(error) or time.monotonic() >= deadline:
                return error  # a constraint (or a lost lease) never passes on a retry
            log.warning("committing %d run write(s) failed (%s); retrying", len(items), error)
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    async def _commit_once(self, items: list[QueuedWrite]) -> BaseException | None:
        try:
            await self._commit(items)
        except Exception as exc:  # locked, full, read-only, I/O, fenced: the caller decides
            return exc
        return None

    def _give_up(self, run_id: str | None, items: list[QueuedWrite], error: BaseException) -> None:
        if run_id is None:
            log.error("a change of no run could not be committed: %s", error)
            return
        log.error(
            "the event log of run %s could not be written (%d write(s) given up): %s",
            run_id,
            len(items),
            error,
        )
        self._lose(run_id, items)

    def _lose(self, run_id: str, items: list[QueuedWrite]) -> None:
        known = run_id in self._lost
        self._lost.setdefault(run_id, None)
        for item in items:
            self._note_lost(run_id, item)
        if known:
            return
        if self.on_lost is not None:
            try:
                self.on_lost(run_id)
            except Exception:
                log.exception("on_lost failed for run %s", run_id)

    def _publish_items(self, items: list[QueuedWrite]) -> None:
        by_run: dict[str, list[Frame]] = {}
        for item in items:
            if item.frame is not None and item.run_id is not None:
                by_run.setdefault(item.run_id, []).append(item.frame)
        for run_id, batch in by_run.items():
            try:
                self._publish(run_id, batch)
            except Exception:  # a subscriber's bug must not stop the log
                log.exception("publishing frames of run %s failed", run_id)

    def _wake_waiters(self) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, future in self._waiters:
            if future.done():
                continue
            if target > self._resolved:
                still.append((target, future))
            else:
                future.set_result(None)
        self._waiters = still
