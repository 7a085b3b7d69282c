"""Crons: runs that start themselves on a schedule, each tick exactly once.

A cron is a five-field cron schedule (minute, hour, day of month, month, day of
week) read in an IANA time zone (UTC when unset), and the run request each tick
starts: on its thread, or on a new thread per run (`on_run_completed` keeps or
deletes that thread when the run ends). The schedule math is croniter's, not
ours: `check_schedule` and `check_timezone` refuse what it cannot read, and
`next_tick` says when a cron fires next.

Exactly once. A cron's row carries `next_run_at`, the tick it fires next. The
tick's run is recorded in the same transaction that moves `next_run_at` on, and
only while `next_run_at` is still that tick (`engine.repositories.CronRepository`):
embedded, the one process owning DATA_DIR does it under SQLite's write lock;
scale-out, every API replica and every `atelier worker` (cli/worker.py) runs the
scheduler — unless its CRON_SCHEDULER is off — and claims a due cron with
`SELECT … FOR UPDATE SKIP LOCKED`, so one process records the tick's run and the
others skip the row. A process killed between claim and commit commits nothing
(its lock dies with its connection), and another one fires the tick.

Missed ticks. The next tick is computed from the firing time, not from the tick
that fired: a cron due many times while every process was down fires once when
one comes back, then keeps its schedule (no burst).

`CronScheduler` polls for due crons every `interval` seconds with a clock that
tests replace, so they need not wait for the minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

log = logging.getLogger(__name__)

#: Seconds between two looks for due crons.
CRON_POLL = 1.0

#: What a thread-less cron does with each run's thread once the run ended.
OnRunCompleted = Literal["delete", "keep"]


@dataclass(slots=True)
class CronRecord:
    """A schedule and the run request each of its ticks starts."""

    cron_id: str
    #: The API key that made it (only it sees the cron; its runs are that key's).
    owner: str
    assistant_id: str
    #: The thread every run goes to, or None: a new thread per run.
    thread_id: str | None
    #: Five-field cron expression.
    schedule: str
    #: IANA time zone the schedule is read in (None: UTC).
    timezone: str | None
    #: The run options each tick's run gets (input, config, stream options, webhook,
    #: interrupt_before/after, durability, multitask_strategy), as the client sent them.
    payload: dict[str, Any]
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Thread-less crons: delete or keep a run's thread when it ended (None: keep).
    on_run_completed: OnRunCompleted | None = None
    #: No tick after this time (ISO 8601, UTC), or None.
    end_time: str | None = None
    enabled: bool = True
    #: The next tick (ISO 8601, UTC); None once `end_time` has passed.
    next_run_at: str | None = None


def utc_now() -> datetime:
    """Return the current time in UTC (the scheduler's default clock)."""
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """Return a moment as ISO 8601 text in UTC, or None.

    Always with microseconds, so that two such texts sort as their moments do.
    """
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="microseconds")


def parse_time(text: str | None) -> datetime | None:
    """Return the aware datetime an ISO 8601 text names (naive: UTC), or None."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def check_schedule(schedule: str) -> str:
    """Return a five-field cron schedule, normalised to single spaces.

    Raises:
        ValueError: It is not five fields, croniter cannot read it, or it names no
            date that exists (`0 0 31 2 *`).
    """
    fields = schedule.split()
    if len(fields) != 5:
        raise ValueError(
            "schedule must have five fields (minute hour day-of-month month day-of-week), "
            f"not {len(fields)}"
        )
    normalised = " ".join(fields)
    if not croniter.is_valid(normalised):
        raise ValueError(f"schedule {normalised!r} is not a valid cron expression")
    try:
        croniter(normalised, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(f"schedule {normalised!r} names no date that exists") from None
    return normalised


def check_timezone(name: str | None) -> str | None:
    """Return an IANA time zone name unchanged (None: UTC).

    Raises:
        ValueError: The time zone database has no such zone.
    """
    if name is None:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone {name!r} is not an IANA time zone") from None
    return name


def next_tick(
    schedule: str, timezone: str | None, after: datetime, end_time: datetime | None = None
) -> datetime | None:
    """Return the schedule's first tick strictly after `after`, in UTC.

    The schedule is read in `timezone` (wall-clock time there, daylight saving
    included); None when that tick would fall after `end_time`.
    """
    zone = ZoneInfo(timezone or "UTC")
    tick: datetime = croniter(schedule, after.astimezone(zone)).get_next(datetime)
    tick = tick.astimezone(UTC)
    if end_time is not None and tick > end_time:
        return None
    return tick


class CronScheduler:
    """Look for due crons every `interval` seconds and fire them, until stopped."""

    def __init__(
        self,
        fire_due: Callable[[datetime], Awaitable[int]],
        *,
        clock: Callable[[], datetime] = utc_now,
        interval: float = CRON_POLL,
    ) -> None:
        """Fire with `fire_due(now)`, which returns how many ticks it fired.

        Args:
            fire_due: Fires every cron due at the time given.
            clock: Returns the current time (tests move it on instead of waiting).
            interval: Seconds between two passes.
        """
        self.fire_due = fire_due
        self.clock = clock
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start polling in a task of this loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="cron-scheduler")

    async def stop(self) -> None:
        """Stop polling (a pass in progress is cancelled; its transaction rolls back)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.fire_due(self.clock())
            except Exception:  # the database is unreachable now: try again next time
                log.exception("the cron scheduler's pass failed")
            await asyncio.sleep(self.interval)


__all__ = [
    "CRON_POLL",
    "CronRecord",
    "CronScheduler",
    "OnRunCompleted",
    "check_schedule",
    "check_timezone",
    "iso",
    "next_tick",
    "parse_time",
    "utc_now",
]
