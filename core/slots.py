"""Publishing slots: when each post of a calendar goes out (docs/platforms.md).

A pure module — no product types, no I/O, no clock — so the engine's scheduler,
the campaign service and tests call it alike:

- `parse_window` validates a window ``{start, end, timezone, days?, times?,
  min_gap_minutes}`` and raises `WindowError` naming the field and the rule;
- `plan_slots` gives each item (the platforms it goes to) a slot: inside the
  window, on an allowed day and time, spread evenly over the allowed time, never
  two posts on one platform closer than the minimum gap (counting the slots
  already taken), and moved by a small random offset so posts do not go out on
  the exact hour;
- `next_free_slot` finds the earliest free slot after an instant, for a post
  approved after its own slot went by.

Days are ISO weekdays (1 = Monday … 7 = Sunday) or their English names
(``"mon"``, ``"monday"``). Times are local ranges ``"09:00-12:00"`` (both ends
allowed) or single times ``"20:00"``, meaning within `max_offset_minutes` of it.
Without ``days`` every day is allowed, without ``times`` the whole day. A naive
``start``/``end`` is local time in ``timezone``; slots are returned as aware
datetimes in that zone. Candidates lie on a `GRID_MINUTES` grid of local time;
daylight-saving gaps are skipped and a repeated hour is taken once per instant.
"""

from __future__ import annotations

import bisect
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "GRID_MINUTES",
    "MAX_OFFSET_MINUTES",
    "MAX_WINDOW_DAYS",
    "Occupied",
    "Window",
    "WindowError",
    "next_free_slot",
    "parse_window",
    "plan_slots",
]

#: Candidate slots lie on this grid of local time (minutes).
GRID_MINUTES = 5
#: The largest random offset a slot gets by default (minutes, either way).
MAX_OFFSET_MINUTES = 10
#: The longest window.
MAX_WINDOW_DAYS = 400
#: The longest minimum gap (one week).
MAX_GAP_MINUTES = 7 * 24 * 60
#: How far past a window's end `next_free_slot` looks for a late post.
NEXT_FREE_HORIZON_DAYS = 31

_DAY_NAMES = {
    name: number
    for number, names in enumerate(
        (
            ("mon", "monday"),
            ("tue", "tuesday"),
            ("wed", "wednesday"),
            ("thu", "thursday"),
            ("fri", "friday"),
            ("sat", "saturday"),
            ("sun", "sunday"),
        ),
        start=1,
    )
    for name in names
}
_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class WindowError(ValueError):
    """A window (or a request against it) breaks a rule; `field` names the field."""

    def __init__(self, field: str, rule: str) -> None:
        """Name the field (``window.end``) and the rule it breaks."""
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


@dataclass(frozen=True)
class Window:
    """A validated window (`parse_window`)."""

    start: datetime  # aware, in `zone`
    end: datetime  # aware, in `zone`, after start
    zone: ZoneInfo
    days: frozenset[int]  # ISO weekdays allowed
    ranges: tuple[tuple[time, time], ...]  # local time ranges allowed (inclusive)
    points: tuple[time, ...]  # local times allowed within max_offset
    min_gap: timedelta
    max_offset: timedelta

    @property
    def timezone(self) -> str:
        """Return the window's IANA time zone name."""
        return self.zone.key


@dataclass(frozen=True)
class Occupied:
    """A slot already taken on a platform (another campaign's post, a published one)."""

    at: datetime  # aware
    platform: str


def _instant(value: Any, field: str, zone: ZoneInfo) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise WindowError(field, "must be an ISO 8601 date-time") from None
    if not isinstance(value, datetime):
        raise WindowError(field, "must be an ISO 8601 date-time")
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(zone)


def _days(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset(range(1, 8))
    if not isinstance(value, list | tuple) or not value:
        raise WindowError("window.days", "must be a non-empty list of weekdays")
    days: set[int] = set()
    for index, day in enumerate(value):
        if isinstance(day, int) and not isinstance(day, bool) and 1 <= day <= 7:
            days.add(day)
        elif isinstance(day, str) and day.strip().casefold() in _DAY_NAMES:
            days.add(_DAY_NAMES[day.strip().casefold()])
        else:
            raise WindowError(
                f"window.days[{index}]", "must be 1–7 (ISO, 1 = Monday) or a name: mon … sun"
            )
    return frozenset(days)


def _clock(text: str, field: str) -> time:
    match = _TIME.match(text.strip())
    if match is None:
        raise WindowError(field, "must be HH:MM (24-hour) or HH:MM-HH:MM")
    return time(int(match.group(1)), int(match.group(2)))


def _times(value: Any) -> tuple[tuple[tuple[time, time], ...], tuple[time, ...]]:
    if value is None:
        return ((time(0, 0), time(23, 59)),), ()
    if not isinstance(value, list | tuple) or not value:
        raise WindowError("window.times", "must be a non-empty list of HH:MM or HH:MM-HH:MM")
    ranges: list[tuple[time, time]] = []
    points: list[time] = []
    for index, item in enumerate(value):
        field = f"window.times[{index}]"
        if not isinstance(item, str):
            raise WindowError(field, "must be HH:MM (24-hour) or HH:MM-HH:MM")
        if "-" in item:
            first, _, last = item.partition("-")
            low, high = _clock(first, field), _clock(last, field)
            if high <= low:
                raise WindowError(
                    field, "the range must end after it starts (split a range over midnight)"
                )
            ranges.append((low, high))
        else:
            points.append(_clock(item, field))
    return tuple(sorted(ranges)), tuple(sorted(set(points)))


def _minutes(value: Any, field: str, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise WindowError(field, f"must be a whole number of minutes, 0–{high}")
    return value


def parse_window(
    data: Mapping[str, Any], *, max_offset_minutes: int = MAX_OFFSET_MINUTES
) -> Window:
    """Validate a window and return it.

    Args:
        data: ``{start, end, timezone, days?, times?, min_gap_minutes}`` (start/end
            ISO 8601 strings or datetimes).
        max_offset_minutes: The largest random offset a slot gets (0–59).

    Raises:
        WindowError: A field is missing or breaks its rule: ``window.timezone`` is
            not an IANA zone, ``window.end`` is not after ``window.start`` or the
            window is longer than `MAX_WINDOW_DAYS`, a day or time is malformed,
            ``window.min_gap_minutes`` is not 0–10080.
    """
    if not isinstance(data, Mapping):
        raise WindowError("window", "must be an object")
    unknown = sorted(set(data) - {"start", "end", "timezone", "days", "times", "min_gap_minutes"})
    if unknown:
        raise WindowError(f"window.{unknown[0]}", "is not a field of a window")
    name = data.get("timezone")
    if not isinstance(name, str) or not name.strip():
        raise WindowError("window.timezone", "is required: an IANA time zone such as Asia/Shanghai")
    try:
        zone = ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(
            "window.timezone", f"{name!r} is not an IANA time zone (e.g. Asia/Shanghai)"
        ) from None
    for key in ("start", "end"):
        if data.get(key) is None:
            raise WindowError(f"window.{key}", "is required: an ISO 8601 date-time")
    start = _instant(data["start"], "window.start", zone)
    end = _instant(data["end"], "window.end", zone)
    if end <= start:
        raise WindowError("window.end", "must be after window.start")
    if end - start > timedelta(days=MAX_WINDOW_DAYS):
        raise WindowError("window.end", f"a window is at most {MAX_WINDOW_DAYS} days long")
    ranges, points = _times(data.get("times"))
    gap = _minutes(data.get("min_gap_minutes", 0), "window.min_gap_minutes", MAX_GAP_MINUTES)
    offset = _minutes(max_offset_minutes, "max_offset_minutes", 59)
    return Window(
        start=start,
        end=end,
        zone=zone,
        days=_days(data.get("days")),
        ranges=ranges,
        points=points,
        min_gap=timedelta(minutes=gap),
        max_offset=timedelta(minutes=offset),
    )


# ---------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------


def _local(day: date, at: time, zone: ZoneInfo) -> datetime | None:
    """Return a local wall time as an instant; None in a daylight-saving gap."""
    naive = datetime.combine(day, at)
    aware = naive.replace(tzinfo=zone)
    if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive:
        return None
    return aware


def _grid(low: time, high: time) -> Iterable[time]:
    minute = low.hour * 60 + low.minute
    minute += -minute % GRID_MINUTES
    last = high.hour * 60 + high.minute
    while minute <= last:
        yield time(minute // 60, minute % 60)
        minute += GRID_MINUTES


def _candidates(window: Window, start: datetime, end: datetime) -> list[datetime]:
    """Return the allowed grid instants in [start, end], in order (UTC)."""
    zone = window.zone
    times = [*(t for low, high in window.ranges for t in _grid(low, high)), *window.points]
    found: set[datetime] = set()
    day = start.astimezone(zone).date()
    last = end.astimezone(zone).date()
    while day <= last:
        if day.isoweekday() in window.days:
            offset = datetime.combine(day, time(0), tzinfo=zone).utcoffset()
            steady = offset == datetime.combine(day, time(23, 59), tzinfo=zone).utcoffset()
            for at in times:
                if steady and offset is not None:  # no clock change today: plain arithmetic
                    instant: datetime | None = (datetime.combine(day, at) - offset).replace(
                        tzinfo=UTC
                    )
                else:
                    instant = _local(day, at, zone)
                if instant is not None and start <= instant <= end:
                    found.add(instant.astimezone(UTC))
        day += timedelta(days=1)
    return sorted(found)


def _allowed(window: Window, instant: datetime, *, within_window: bool = True) -> bool:
    """Tell whether an instant is on an allowed day and time (and inside the window)."""
    if within_window and not window.start <= instant <= window.end:
        return False
    local = instant.astimezone(window.zone)
    if local.isoweekday() not in window.days:
        return False
    clock = local.time().replace(tzinfo=None)
    if any(low <= clock <= high for low, high in window.ranges):
        return True
    for point in window.points:
        target = _local(local.date(), point, window.zone)
        if target is not None and abs(instant - target) <= window.max_offset:
            return True
    return False


# ---------------------------------------------------------------------------
# Placing
# ---------------------------------------------------------------------------


class _Calendar:
    """The slots taken per platform, sorted, for the minimum-gap test."""

    def __init__(self, gap: timedelta, occupied: Iterable[Occupied]) -> None:
        self.gap = gap
        self.taken: dict[str, list[datetime]] = {}
        for slot in occupied:
            self.take(slot.at, [slot.platform])

    def free(self, instant: datetime, platforms: Sequence[str]) -> bool:
        for platform in platforms:
            slots = self.taken.get(platform, [])
            index = bisect.bisect_left(slots, instant)
            for neighbour in slots[max(0, index - 1) : index + 1]:
                if abs(neighbour - instant) < self.gap:
                    return False
        return True

    def take(self, instant: datetime, platforms: Sequence[str]) -> None:
        for platform in platforms:
            bisect.insort(self.taken.setdefault(platform, []), instant.astimezone(UTC))


def _with_offset(
    window: Window,
    base: datetime,
    platforms: Sequence[str],
    calendar: _Calendar,
    rng: random.Random,
    *,
    not_before: datetime | None = None,
    within_window: bool = True,
) -> datetime:
    """Move a free slot by a small random offset that keeps it allowed and free.

    The offset is 1 … max_offset minutes either way (only later with `not_before`),
    never onto a full hour; when no offset fits, the slot stays where it is.
    """
    limit = int(window.max_offset.total_seconds() // 60)
    offsets = [m for m in range(-limit, limit + 1) if m]
    rng.shuffle(offsets)
    for minutes in offsets:
        moved = base + timedelta(minutes=minutes)
        if not_before is not None and moved < not_before:
            continue
        if moved.astimezone(window.zone).minute == 0:
            continue  # the point of the offset: not on the hour
        if _allowed(window, moved, within_window=within_window) and calendar.free(moved, platforms):
            return moved
    return base


def _nearest_free(
    candidates: Sequence[datetime],
    target: int,
    floor: int,
    platforms: Sequence[str],
    calendar: _Calendar,
) -> int | None:
    """Return the free candidate nearest to `target` at or after index `floor`."""
    for distance in range(len(candidates)):
        for index in (target + distance, target - distance):
            if floor <= index < len(candidates) and calendar.free(candidates[index], platforms):
                return index
    return None


def _place(
    window: Window,
    candidates: Sequence[datetime],
    items: Sequence[Sequence[str]],
    occupied: Sequence[Occupied],
    rng: random.Random,
    *,
    spread: bool,
) -> list[datetime] | None:
    """Place every item in order (spread evenly, or each as early as it fits)."""
    calendar = _Calendar(window.min_gap, occupied)
    slots: list[datetime] = []
    floor = 0
    for number, platforms in enumerate(items):
        target = (number * 2 + 1) * len(candidates) // (2 * len(items)) if spread else floor
        index = _nearest_free(candidates, max(target, floor), floor, platforms, calendar)
        if index is None:
            return None
        previous = slots[-1] if slots else None
        slot = _with_offset(
            window, candidates[index], platforms, calendar, rng, not_before=previous
        )
        calendar.take(slot, platforms)
        slots.append(slot)
        floor = index
    return slots


def _platform_lists(items: Sequence[Any]) -> list[list[str]]:
    lists: list[list[str]] = []
    for index, item in enumerate(items):
        platforms = item.get("platforms") if isinstance(item, Mapping) else item
        if (
            not isinstance(platforms, list | tuple)
            or not platforms
            or not all(isinstance(p, str) and p for p in platforms)
        ):
            raise WindowError(f"items[{index}].platforms", "must be a non-empty list of names")
        lists.append(list(dict.fromkeys(platforms)))
    return lists


def _occupied(occupied: Iterable[Any], zone: ZoneInfo) -> list[Occupied]:
    found: list[Occupied] = []
    for index, slot in enumerate(occupied):
        if isinstance(slot, Occupied):
            found.append(slot)
            continue
        if not isinstance(slot, Mapping) or not isinstance(slot.get("platform"), str):
            raise WindowError(f"occupied[{index}]", "must be {at, platform}")
        found.append(
            Occupied(_instant(slot.get("at"), f"occupied[{index}].at", zone), slot["platform"])
        )
    return found


def plan_slots(
    window: Window | Mapping[str, Any],
    items: Sequence[Sequence[str] | Mapping[str, Any]],
    rng: random.Random,
    occupied: Iterable[Occupied | Mapping[str, Any]] = (),
) -> list[datetime]:
    """Give each item a slot (module docstring), in the items' order.

    Items are placed in order, each near its even share of the allowed time
    (the k-th of n at (2k + 1)/2n of the candidate slots) and never before the
    previous item; a slot too close to a taken one on any of the item's platforms
    moves to the nearest free candidate. When that spreading leaves an item no
    room, the items are packed from the window's start instead (as early as each
    fits); when even that fails, the window is too small.

    Args:
        window: A window (`parse_window`'s result or its input).
        items: Each item's platforms (a list of names, or ``{"platforms": [...]}``).
        rng: The random source of the offsets (seed it for a reproducible plan).
        occupied: Slots already taken: `Occupied` or ``{"at", "platform"}``.

    Returns:
        One aware datetime per item, in the window's time zone, non-decreasing.

    Raises:
        WindowError: The window is invalid, an item names no platform, or the
            window has no room for the items with the minimum gap (``window``).
    """
    if not isinstance(window, Window):
        window = parse_window(window)
    platform_lists = _platform_lists(items)
    if not platform_lists:
        return []
    taken = _occupied(occupied, window.zone)
    candidates = _candidates(window, window.start, window.end)
    if not candidates:
        raise WindowError("window", "no allowed day and time falls inside the window")
    for spread in (True, False):
        slots = _place(window, candidates, platform_lists, taken, rng, spread=spread)
        if slots is not None:
            return [slot.astimezone(window.zone) for slot in slots]
    gap = int(window.min_gap.total_seconds() // 60)
    raise WindowError(
        "window",
        f"not enough room for {len(platform_lists)} posts with {gap} minutes between two "
        "posts on one platform: widen the window, allow more days or times, or shorten the gap",
    )


def next_free_slot(
    after: datetime,
    platforms: Sequence[str],
    window: Window | Mapping[str, Any],
    rng: random.Random,
    occupied: Iterable[Occupied | Mapping[str, Any]] = (),
) -> datetime | None:
    """Return the earliest free slot at or after `after` for a post on `platforms`.

    For a post approved after its slot went by: the slot keeps the window's days,
    times and minimum gap, gets a small offset that never moves it before `after`,
    and may fall after the window's end (the post is approved; it goes out at the
    next allowed time) up to `NEXT_FREE_HORIZON_DAYS` later.

    Returns:
        An aware datetime in the window's zone, or None when no allowed time is
        free within the horizon.
    """
    if not isinstance(window, Window):
        window = parse_window(window)
    if after.tzinfo is None:
        after = after.replace(tzinfo=window.zone)
    names = _platform_lists([list(platforms)])[0]
    calendar = _Calendar(window.min_gap, _occupied(occupied, window.zone))
    horizon = max(after, window.end) + timedelta(days=NEXT_FREE_HORIZON_DAYS)
    for candidate in _candidates(window, after, horizon):
        if calendar.free(candidate, names):
            slot = _with_offset(
                window, candidate, names, calendar, rng, not_before=after, within_window=False
            )
            return slot.astimezone(window.zone)
    return None
