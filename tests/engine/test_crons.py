"""Crons in the engine: the schedule math, and each backend's repository firing a tick once."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from engine.crons import CronRecord, CronScheduler, check_schedule, check_timezone, iso, next_tick
from engine.repositories import CronRepository
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


# --------------------------------------------------------------------------- schedule math


def test_a_schedule_is_five_cron_fields() -> None:
    assert check_schedule(" */5  9-18 * * 1-5 ") == "*/5 9-18 * * 1-5"
    for bad in ("* * * *", "* * * * * *", "61 * * * *", "* * * * funday", "@hourly"):
        with pytest.raises(ValueError):
            check_schedule(bad)


def test_a_time_zone_is_an_iana_name() -> None:
    assert check_timezone(None) is None
    assert check_timezone("Asia/Shanghai") == "Asia/Shanghai"
    with pytest.raises(ValueError, match="IANA"):
        check_timezone("Mars/Olympus")


def test_the_next_tick_is_read_in_the_time_zone_and_stops_at_the_end_time() -> None:
    assert next_tick("* * * * *", None, T0) == datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
    # 09:00 in Shanghai (UTC+8) is 01:00 UTC; the one after 09:00:30 UTC is the next day's.
    assert next_tick("0 9 * * *", "Asia/Shanghai", T0) == datetime(2026, 3, 3, 1, tzinfo=UTC)
    # New York moves to daylight saving time on 8 March 2026: 09:00 is then 13:00 UTC.
    assert next_tick("0 9 * * *", "America/New_York", datetime(2026, 3, 8, 0, tzinfo=UTC)) == (
        datetime(2026, 3, 8, 13, tzinfo=UTC)
    )
    assert next_tick("* * * * *", None, T0, end_time=T0 + timedelta(seconds=20)) is None


def test_iso_texts_sort_as_their_moments() -> None:
    moments = [T0, T0 + timedelta(microseconds=1), T0 + timedelta(seconds=1)]
    texts = [iso(m) or "" for m in moments]
    assert texts == sorted(texts)


async def test_the_scheduler_fires_with_its_clock_until_stopped() -> None:
    seen: list[datetime] = []

    async def fire_due(now: datetime) -> int:
        seen.append(now)
        return 0

    scheduler = CronScheduler(fire_due, clock=lambda: T0, interval=0.01)
    scheduler.start()
    await asyncio.sleep(0.1)
    await scheduler.stop()
    count = len(seen)
    await asyncio.sleep(0.05)
    assert count >= 2 and len(seen) == count and set(seen) == {T0}


# --------------------------------------------------------------------------- repositories


def crons_of(opened: Opened) -> CronRepository:
    """Return the cron repository on the storage's database."""
    storage = opened.storage
    if opened.where.startswith("postgresql://"):
        from engine.postgres.crons import PostgresCronRepository

        return PostgresCronRepository(storage.pool)
    from engine.sqlite.crons import SqliteCronRepository

    return SqliteCronRepository(storage.database)


def cron(cron_id: str = "c1", owner: str = "alice", **fields: object) -> CronRecord:
    values: dict[str, object] = {
        "cron_id": cron_id,
        "owner": owner,
        "assistant_id": "studio",
        "thread_id": None,
        "schedule": "* * * * *",
        "timezone": None,
        "payload": {"input": {"request": "x"}},
        "created_at": iso(T0),
        "updated_at": iso(T0),
        "next_run_at": iso(T0 + timedelta(seconds=30)),
        **fields,
    }
    return CronRecord(**values)  # type: ignore[arg-type]


async def test_a_due_tick_is_fired_once_with_its_run(opened: Opened) -> None:
    crons = crons_of(opened)
    await crons.insert(cron())
    async with crons.claim_due(iso(T0) or "") as tick:
        assert tick is None  # not due yet
    due = iso(T0 + timedelta(minutes=1)) or ""
    following = iso(T0 + timedelta(minutes=2))
    async with crons.claim_due(due) as tick:
        assert tick is not None and tick.cron.cron_id == "c1"
        assert await tick.fire(following, run("r1", "t-new"), new_thread=thread("t-new"))
    async with crons.claim_due(due) as tick:
        assert tick is None  # spent
    assert (await opened.storage.runs.get("r1")) is not None
    stored = await crons.get("alice", "c1")
    assert stored is not None and stored.next_run_at is not None
    assert stored.next_run_at.startswith("2026-03-02T09:02:30")


async def test_a_tick_fails_whole_when_its_run_cannot_be_stored(opened: Opened) -> None:
    crons = crons_of(opened)
    await opened.storage.threads.insert(thread("taken"))
    await crons.insert(cron())
    due = iso(T0 + timedelta(minutes=1)) or ""
    with pytest.raises(Exception, match="already exists"):
        async with crons.claim_due(due) as tick:
            assert tick is not None
            await tick.fire(
                iso(T0 + timedelta(minutes=2)), run("r1", "taken"), new_thread=thread("taken")
            )
    async with crons.claim_due(due) as tick:  # still due: nothing was spent
        assert (
            tick is not None
            and tick.cron.next_run_at == (await crons.get("alice", "c1")).next_run_at
        )  # type: ignore[union-attr]


async def test_disabled_and_other_owners_crons_are_left_alone(opened: Opened) -> None:
    crons = crons_of(opened)
    await crons.insert(cron("off", enabled=False))
    await crons.insert(cron("bob's", owner="bob", metadata={"kind": "weekly"}))
    due = iso(T0 + timedelta(minutes=1)) or ""
    async with crons.claim_due(due) as tick:
        assert tick is not None and tick.cron.cron_id == "bob's"
    assert await crons.get("alice", "bob's") is None
    assert await crons.delete("alice", "bob's") is False
    assert [c.cron_id for c in await crons.search("bob", metadata={"kind": "weekly"})] == ["bob's"]
    assert await crons.count("alice") == 1 and await crons.count("bob") == 1
    assert [c.cron_id for c in await crons.search("alice", enabled=False)] == ["off"]


async def test_two_schedulers_racing_for_a_tick_fire_it_once(opened: Opened) -> None:
    crons = crons_of(opened)
    await crons.insert(cron())
    due = iso(T0 + timedelta(minutes=1)) or ""
    following = iso(T0 + timedelta(minutes=2))
    gate = asyncio.Event()

    async def scheduler(run_id: str) -> bool:
        async with crons.claim_due(due) as tick:
            if tick is None:
                return False
            await gate.wait()  # both have claimed (or skipped) before either fires
            return await tick.fire(
                following, run(run_id, f"t-{run_id}"), new_thread=thread(f"t-{run_id}")
            )

    tasks = [asyncio.create_task(scheduler(r)) for r in ("r1", "r2")]
    await asyncio.sleep(0.3)
    gate.set()
    assert sorted(await asyncio.gather(*tasks)) == [False, True]
    stored = [await opened.storage.runs.get(r) for r in ("r1", "r2")]
    assert sum(r is not None for r in stored) == 1


async def test_an_update_read_before_a_tick_fired_does_not_bring_the_tick_back(
    opened: Opened,
) -> None:
    crons = crons_of(opened)
    await crons.insert(cron())
    read = await crons.get("alice", "c1")
    assert read is not None
    async with crons.claim_due(iso(T0 + timedelta(minutes=1)) or "") as tick:
        assert tick is not None
        await tick.fire(iso(T0 + timedelta(minutes=2)), None)
    stale = dataclasses.replace(read, metadata={"edited": True})
    assert not await crons.replace(stale, previous_next_run_at=read.next_run_at)
    fresh = await crons.get("alice", "c1")
    assert fresh is not None and fresh.next_run_at != read.next_run_at
    assert await crons.replace(
        dataclasses.replace(fresh, metadata={"edited": True}),
        previous_next_run_at=fresh.next_run_at,
    )
    edited = await crons.get("alice", "c1")
    assert edited is not None and edited.metadata == {"edited": True}
    assert edited.next_run_at == fresh.next_run_at
