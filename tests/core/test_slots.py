"""Publishing slots (core.slots): the window's rules, the acceptance calendar, properties.

The properties are checked over many seeded random windows and item lists (the
project has no hypothesis; a fixed seed list keeps every run the same).
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from core.slots import (
    MAX_OFFSET_MINUTES,
    WindowError,
    next_free_slot,
    parse_window,
    plan_slots,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
THREE_DAYS = {
    "start": "2026-03-02T00:00:00",
    "end": "2026-03-05T00:00:00",
    "timezone": "Asia/Shanghai",
    "min_gap_minutes": 240,
}


def gaps_hold(slots: list[datetime], items: list[list[str]], gap: timedelta) -> bool:
    by_platform: dict[str, list[datetime]] = {}
    for slot, platforms in zip(slots, items, strict=True):
        for platform in platforms:
            by_platform.setdefault(platform, []).append(slot)
    return all(
        b - a >= gap
        for taken in by_platform.values()
        for a, b in zip(sorted(taken), sorted(taken)[1:], strict=False)
    )


# --- the acceptance calendar ------------------------------------------------------


def test_six_posts_on_two_platforms_over_three_days_with_a_four_hour_gap() -> None:
    items = [["xiaohongshu", "weibo"]] * 6
    slots = plan_slots(THREE_DAYS, items, random.Random(35))

    window = parse_window(THREE_DAYS)
    assert len(slots) == 6
    assert all(window.start <= s <= window.end for s in slots)
    assert all(s.tzinfo is not None and s.utcoffset() == timedelta(hours=8) for s in slots)
    assert slots == sorted(slots)
    assert gaps_hold(slots, items, timedelta(hours=4))
    # Spread evenly: one post every 12 hours, give or take the offset.
    spacing = [(b - a).total_seconds() / 3600 for a, b in itertools.pairwise(slots)]
    assert all(11.5 <= hours <= 12.5 for hours in spacing), spacing
    # A small offset: never on the hour, never more than MAX_OFFSET_MINUTES off the grid.
    assert all(s.minute != 0 for s in slots)
    # The same seed gives the same plan; another seed moves the offsets only.
    assert plan_slots(THREE_DAYS, items, random.Random(35)) == slots
    other = plan_slots(THREE_DAYS, items, random.Random(36))
    assert other != slots
    assert all(
        abs(a - b) <= timedelta(minutes=2 * MAX_OFFSET_MINUTES)
        for a, b in zip(slots, other, strict=True)
    )


def test_slots_already_taken_on_a_platform_are_kept_clear_of() -> None:
    # One post alone goes to the middle of the window, unless that is taken.
    middle = datetime(2026, 3, 3, 12, tzinfo=SHANGHAI)
    taken = [{"at": middle.isoformat(), "platform": "weibo"}]
    slots = plan_slots(THREE_DAYS, [["weibo"]], random.Random(1), taken)
    assert abs(slots[0] - middle) >= timedelta(hours=4)
    assert abs(slots[0] - middle) <= timedelta(hours=4, minutes=MAX_OFFSET_MINUTES)
    # Another platform's slot is no obstacle.
    slots = plan_slots(THREE_DAYS, [["xiaohongshu"]], random.Random(1), taken)
    assert abs(slots[0] - middle) <= timedelta(minutes=MAX_OFFSET_MINUTES)


def test_days_and_times_are_honoured_in_the_windows_time_zone() -> None:
    window = {
        **THREE_DAYS,
        "timezone": "Europe/Berlin",
        "end": "2026-03-20T00:00:00",
        "days": ["sat", 7],
        "times": ["09:00-11:00", "20:00"],
    }
    slots = plan_slots(window, [["x"], ["linkedin"]] * 4, random.Random(2))
    berlin = ZoneInfo("Europe/Berlin")
    for slot in slots:
        local = slot.astimezone(berlin)
        assert local.isoweekday() in (6, 7)
        in_range = time(9) <= local.time() <= time(11)
        near_eight = abs(
            datetime.combine(local.date(), time(20), tzinfo=berlin) - slot
        ) <= timedelta(minutes=MAX_OFFSET_MINUTES)
        assert in_range or near_eight, local


def test_a_window_across_a_daylight_saving_change_skips_the_missing_hour() -> None:
    window = {
        "start": "2026-03-08T00:00:00",
        "end": "2026-03-09T00:00:00",
        "timezone": "America/New_York",
        "times": ["02:00-02:55"],  # does not exist on 8 March 2026 in New York
        "min_gap_minutes": 0,
    }
    with pytest.raises(WindowError) as error:
        plan_slots(window, [["x"]], random.Random(1))
    assert error.value.field == "window" and "no allowed day and time" in error.value.rule


# --- the window's rules ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        ({"timezone": "Mars/Olympus"}, "window.timezone", "not an IANA time zone"),
        ({"timezone": "../../etc/passwd"}, "window.timezone", "not an IANA time zone"),
        ({"timezone": None}, "window.timezone", "is required"),
        ({"start": None}, "window.start", "is required"),
        ({"start": "next tuesday"}, "window.start", "ISO 8601"),
        ({"end": "2026-03-01T00:00:00"}, "window.end", "after window.start"),
        ({"end": "2026-03-02T00:00:00"}, "window.end", "after window.start"),
        ({"end": "2028-03-02T00:00:00"}, "window.end", "at most 400 days"),
        ({"days": []}, "window.days", "non-empty"),
        ({"days": ["funday"]}, "window.days[0]", "mon … sun"),
        ({"days": [1, 8]}, "window.days[1]", "1–7"),
        ({"days": [True]}, "window.days[0]", "1–7"),
        ({"times": "09:00"}, "window.times", "non-empty list"),
        ({"times": ["9am"]}, "window.times[0]", "HH:MM"),
        ({"times": ["24:00"]}, "window.times[0]", "HH:MM"),
        ({"times": ["09:00", 900]}, "window.times[1]", "HH:MM"),
        ({"times": ["22:00-02:00"]}, "window.times[0]", "split a range over midnight"),
        ({"min_gap_minutes": -5}, "window.min_gap_minutes", "0–10080"),
        ({"min_gap_minutes": "240"}, "window.min_gap_minutes", "whole number"),
        ({"min_gap_minutes": 10081}, "window.min_gap_minutes", "0–10080"),
        ({"colour": "red"}, "window.colour", "not a field"),
    ],
)
def test_a_bad_window_names_the_field_and_the_rule(
    change: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(WindowError) as error:
        parse_window({**THREE_DAYS, **change})
    assert error.value.field == field
    assert rule in error.value.rule
    assert str(error.value).startswith(f"{field}: ")


def test_too_little_room_for_the_posts_with_the_gap_is_an_error_naming_the_window() -> None:
    # Six posts on one platform need 5 × 15 h = 75 h; the window has 72.
    with pytest.raises(WindowError) as error:
        plan_slots({**THREE_DAYS, "min_gap_minutes": 900}, [["weibo"]] * 6, random.Random(1))
    assert error.value.field == "window"
    assert "not enough room for 6 posts with 900 minutes" in error.value.rule
    # 14 h fits (5 × 14 = 70 h): packed from the start when spreading leaves no room.
    slots = plan_slots({**THREE_DAYS, "min_gap_minutes": 840}, [["weibo"]] * 6, random.Random(1))
    assert gaps_hold(slots, [["weibo"]] * 6, timedelta(hours=14))


def test_an_item_without_platforms_is_refused() -> None:
    with pytest.raises(WindowError) as error:
        plan_slots(THREE_DAYS, [["weibo"], []], random.Random(1))
    assert error.value.field == "items[1].platforms"
    assert plan_slots(THREE_DAYS, [], random.Random(1)) == []


# --- properties over seeded random windows --------------------------------------------


def random_case(rng: random.Random) -> tuple[dict[str, Any], list[list[str]]]:
    zone = rng.choice(["Asia/Shanghai", "Europe/London", "America/New_York", "UTC"])
    start = datetime(2026, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23))
    window: dict[str, Any] = {
        "start": start.isoformat(),
        "end": (start + timedelta(hours=rng.randint(24, 24 * 20))).isoformat(),
        "timezone": zone,
        "min_gap_minutes": rng.choice([0, 30, 60, 120, 240, 480]),
    }
    if rng.random() < 0.5:
        window["days"] = rng.sample(range(1, 8), rng.randint(2, 7))
    if rng.random() < 0.5:
        low = rng.randint(6, 14)
        window["times"] = [f"{low:02d}:00-{low + rng.randint(1, 8):02d}:30"]
        if rng.random() < 0.5:
            window["times"].append(f"{rng.randint(19, 22):02d}:00")
    platforms = ["xiaohongshu", "weibo", "wechat"]
    items = [rng.sample(platforms, rng.randint(1, 2)) for _ in range(rng.randint(1, 10))]
    return window, items


def allowed(window: dict[str, Any], slot: datetime) -> bool:
    parsed = parse_window(window)
    local = slot.astimezone(parsed.zone)
    if not parsed.start <= slot <= parsed.end or local.isoweekday() not in parsed.days:
        return False
    clock = local.time().replace(tzinfo=None)
    if any(low <= clock <= high for low, high in parsed.ranges):
        return True
    return any(
        abs(datetime.combine(local.date(), point, tzinfo=parsed.zone) - slot) <= parsed.max_offset
        for point in parsed.points
    )


@pytest.mark.parametrize("seed", range(60))
def test_properties_of_every_plan(seed: int) -> None:
    rng = random.Random(seed)
    window, items = random_case(rng)
    try:
        slots = plan_slots(window, items, random.Random(seed))
    except WindowError as error:
        # Only an honest "no room": then even packing from the start fails.
        assert error.field == "window", error
        return
    gap = timedelta(minutes=window["min_gap_minutes"])
    assert len(slots) == len(items)
    assert slots == sorted(slots)
    assert all(allowed(window, slot) for slot in slots), (window, slots)
    assert gaps_hold(slots, items, gap)
    assert all(slot.second == 0 for slot in slots)


@pytest.mark.parametrize("seed", range(30))
def test_properties_of_the_next_free_slot(seed: int) -> None:
    rng = random.Random(1000 + seed)
    window, items = random_case(rng)
    try:
        slots = plan_slots(window, items, random.Random(seed))
    except WindowError:
        return
    taken = [
        {"at": slot, "platform": platform}
        for slot, platforms in zip(slots, items, strict=True)
        for platform in platforms
    ]
    after = slots[len(slots) // 2] + timedelta(minutes=rng.randint(1, 600))
    found = next_free_slot(after, ["weibo"], window, random.Random(seed), taken)
    assert found is not None and found >= after
    weibo = [t["at"] for t in taken if t["platform"] == "weibo"]
    gap = timedelta(minutes=window["min_gap_minutes"])
    assert all(abs(found - at) >= gap for at in weibo)
    # It keeps the window's days and times, even past the window's end.
    parsed = parse_window(window)
    assert found.astimezone(parsed.zone).isoweekday() in parsed.days


def test_a_post_approved_after_the_window_goes_out_at_the_next_allowed_time() -> None:
    window = {**THREE_DAYS, "days": ["mon"], "times": ["10:00-11:00"]}
    after = datetime(2026, 3, 4, 15, tzinfo=SHANGHAI)  # Wednesday, past Monday's times
    found = next_free_slot(after, ["xiaohongshu"], window, random.Random(1))
    assert found is not None
    local = found.astimezone(SHANGHAI)
    assert local.isoweekday() == 1 and time(10) <= local.time() <= time(11)
    assert local.date() == datetime(2026, 3, 9).date()
    assert found.astimezone(UTC) > after
