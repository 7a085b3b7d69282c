"""Quotas, spend caps and usage in the engine (engine/quotas.py, engine/usage.py), on each backend.

The limits and their overlay are plain values; the counts are made by each backend's
repositories in the transaction that inserts (SQLite's one writer, PostgreSQL's
per-owner advisory lock): two pools racing on one PostgreSQL database stand for two
API replicas. Each run's usage is written by the event log with its terminal status
and outlives the run's row. The Store's bytes and searches are counted by the
backend's `QuotaRepository` under `ScopedStore`, whose ranked searches run in the
ranking process (engine/ranking.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.composition import KeywordRanker
from engine.crons import CronRecord, iso
from engine.errors import Invalid
from engine.quotas import (
    QUOTA_NAMES,
    Limits,
    QuotaExceeded,
    RunCounts,
    SearchWindow,
    check_quotas,
    check_run_counts,
    fixed_limits,
    limits_with_overrides,
    month_start,
    next_month,
)
from engine.records import RunUsageRecorded, now
from engine.store import MAX_QUERY_CHARS, ScopedStore
from engine.usage import RunUsage
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread

T0 = datetime(2026, 3, 14, 9, 30, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- the values


def test_a_keys_overrides_go_over_the_defaults_and_null_lifts_a_limit() -> None:
    defaults = Limits(runs_per_minute=60, crons=300, monthly_spend=5.0, currency="CNY")

    mine = defaults.overlay({"crons": 10, "runs_per_minute": None, "monthly_spend": 2})

    assert mine.crons == 10 and mine.runs_per_minute is None  # null: unlimited
    assert mine.monthly_spend == 2.0 and isinstance(mine.monthly_spend, float)
    assert mine.currency == "CNY" and mine.assistants is None  # untouched
    assert defaults.overlay({}) == defaults
    assert list(mine.to_json()) == list(QUOTA_NAMES)


@pytest.mark.parametrize(
    ("quotas", "words"),
    [
        ({"crons_per_day": 3}, "unknown quota 'crons_per_day'"),
        ({"crons": -1}, "quota crons must be from 0"),
        ({"crons": 2.5}, "quota crons must be a whole number"),
        ({"crons": True}, "quota crons must be a whole number"),
        ({"crons": "10"}, "quota crons must be a whole number"),
        ({"monthly_spend": float("nan")}, "quota monthly_spend must be from 0"),
        ({"monthly_spend": "5"}, "quota monthly_spend must be a number"),
        ({"store_bytes": 10**13}, "quota store_bytes must be from 0 to"),
    ],
)
def test_junk_quotas_are_refused_naming_the_quota_and_the_rule(
    quotas: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        check_quotas(quotas)
    with pytest.raises(ValueError):
        Limits().overlay(quotas)


async def test_the_limits_of_an_owner_are_its_overrides_over_the_defaults() -> None:
    overrides = {"alice": {"crons": 1}, "bob": {}}

    async def read(owner: str) -> dict[str, Any]:
        return overrides[owner]

    limits_for = limits_with_overrides(Limits(crons=300), read)

    assert (await limits_for("alice")).crons == 1
    assert (await limits_for("bob")).crons == 300
    assert (await fixed_limits(Limits(crons=7))("anyone")).crons == 7


def test_a_refusal_names_the_quota_its_limit_and_when_to_retry() -> None:
    limits = Limits(runs_per_minute=60, runs_at_once=3)
    oldest = T0 - timedelta(seconds=48)  # leaves the window in 12 s

    with pytest.raises(QuotaExceeded) as refused:
        check_run_counts(limits, RunCounts(recent=60, frees_at=oldest), T0)

    assert refused.value.message == "quota runs_per_minute (60) reached; retry in 12 s"
    assert refused.value.status == 429 and refused.value.retry_after == 12
    assert refused.value.quota == "runs_per_minute" and refused.value.field == "runs_per_minute"
    check_run_counts(limits, RunCounts(recent=59, active=2), T0)  # under both: admitted
    with pytest.raises(QuotaExceeded, match=r"quota runs_at_once \(3\) reached"):
        check_run_counts(limits, RunCounts(active=3), T0)


def test_over_the_spend_cap_no_run_starts_before_next_month() -> None:
    limits = Limits(monthly_spend=5.0, currency="CNY")

    with pytest.raises(QuotaExceeded) as refused:
        check_run_counts(limits, RunCounts(spent=5.0), T0)

    assert refused.value.quota == "monthly_spend"
    assert "this month's runs cost 5 CNY" in refused.value.message
    assert refused.value.retry_after == (next_month(T0) - T0).total_seconds()
    assert month_start(T0) == datetime(2026, 3, 1, tzinfo=UTC)
    assert next_month(datetime(2026, 12, 31, 23, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    check_run_counts(limits, RunCounts(spent=4.99), T0)


def test_searches_are_counted_per_calendar_minute() -> None:
    clock = [T0 + timedelta(seconds=45)]
    window = SearchWindow(lambda: clock[0])
    for _ in range(3):
        window.admit("alice", 3)
    window.admit("bob", 3)  # each owner its own count

    with pytest.raises(QuotaExceeded) as refused:
        window.admit("alice", 3)
    assert refused.value.quota == "store_searches_per_minute"
    assert refused.value.retry_after == 15  # the minute's end
    window.admit("alice", None)  # unlimited
    clock[0] = T0 + timedelta(minutes=1)
    window.admit("alice", 3)  # a new minute


# --------------------------------------------------------------------------- runs


async def _insert(opened: Opened, run_id: str, limits: Limits, **fields: Any) -> bool:
    record = dataclasses.replace(run(run_id, f"t-{run_id}"), **fields)
    return bool(
        await opened.storage.runs.insert(
            record, new_thread=thread(f"t-{run_id}"), exclusive=True, limits=limits
        )
    )


async def _record_usage(opened: Opened, record: RunUsageRecorded) -> None:
    opened.storage.events.record(record, run_id=record.run_id)
    await opened.storage.events.flush()


async def test_the_run_past_runs_at_once_is_refused_and_nothing_is_written(
    opened: Opened,
) -> None:
    limits = Limits(runs_at_once=2)
    assert await _insert(opened, "r1", limits)
    assert await _insert(opened, "r2", limits)
    assert await _insert(opened, "bob1", limits, owner="bob")  # another owner's own count

    with pytest.raises(QuotaExceeded, match=r"runs_at_once \(2\) reached"):
        await _insert(opened, "r3", limits)

    assert await opened.storage.runs.get("r3") is None
    assert await opened.storage.threads.get("alice", "t-r3") is None  # not half-written
    assert await _insert(opened, "r4", Limits())  # unlimited: admitted


async def test_runs_per_minute_counts_deleted_runs_and_says_when_room_comes_back(
    opened: Opened,
) -> None:
    limits = Limits(runs_per_minute=2)
    assert await _insert(opened, "r1", limits)
    assert await _insert(opened, "r2", limits)
    # r1 ended (its usage recorded) and was deleted: it still counts for the minute.
    r1 = await opened.storage.runs.get("r1")
    assert r1 is not None
    await _record_usage(
        opened, RunUsageRecorded("r1", "alice", "studio", r1.created_at, RunUsage())
    )
    await opened.storage.runs.delete("r1")

    with pytest.raises(QuotaExceeded) as refused:
        await _insert(opened, "r3", limits)

    assert refused.value.quota == "runs_per_minute"
    assert 55 <= refused.value.retry_after <= 60
    # Runs created over a minute ago no longer count.
    old = (datetime.now(UTC) - timedelta(seconds=61)).isoformat()
    assert await _insert(opened, "o1", Limits(), owner="carol", created_at=old)
    assert await _insert(opened, "o2", limits, owner="carol")


async def test_the_spend_cap_counts_this_months_known_costs_in_its_currency(
    opened: Opened,
) -> None:
    limits = Limits(monthly_spend=1.0, currency="CNY")
    stamp = now()
    for run_id, cost, currency in (
        ("u1", 0.6, "CNY"),
        ("u2", None, "CNY"),  # unknown: not 0, and not counted by the cap either
        ("u3", 5.0, "USD"),  # another currency
    ):
        usage = RunUsage(calls=3, cost=cost, currency=currency)
        await _record_usage(opened, RunUsageRecorded(run_id, "alice", "studio", stamp, usage))
    assert await _insert(opened, "r1", limits)  # 0.6 < 1.0

    await _record_usage(
        opened,
        RunUsageRecorded(
            "u4", "alice", "studio", stamp, RunUsage(calls=1, cost=0.4, currency="CNY")
        ),
    )
    with pytest.raises(QuotaExceeded) as refused:
        await _insert(opened, "r2", limits)

    assert refused.value.quota == "monthly_spend"
    assert "this month's runs cost 1 CNY" in refused.value.message
    assert await _insert(opened, "r3", Limits(monthly_spend=None))


async def test_two_pools_racing_admit_exactly_the_limit(opened: Opened) -> None:
    """Every insert of an owner takes its turn: two replicas never both admit the last run."""
    limits = Limits(runs_per_minute=7)
    storages = [opened.storage]
    pool = None
    if opened.where.startswith("postgresql://"):  # a second replica: a pool of its own
        from engine.postgres import PostgresRunStorage
        from engine.postgres.pool import open_pool

        pool = await open_pool(opened.where, max_size=4)
        storages.append(await PostgresRunStorage(pool).open())
    try:

        async def attempt(i: int) -> bool:
            storage = storages[i % len(storages)]
            record = run(f"r{i}", f"t{i}")
            try:
                return bool(
                    await storage.runs.insert(
                        record, new_thread=thread(f"t{i}"), exclusive=True, limits=limits
                    )
                )
            except QuotaExceeded:
                return False

        admitted = await asyncio.gather(*(attempt(i) for i in range(20)))
    finally:
        if pool is not None:
            await storages[1].close()
            await pool.close()

    assert sum(admitted) == 7
    stored = [i for i in range(20) if await opened.storage.runs.get(f"r{i}") is not None]
    assert [admitted[i] for i in stored] == [True] * 7 and len(stored) == 7


# --------------------------------------------------------------------------- crons, assistants


def _cron(cron_id: str, owner: str = "alice") -> CronRecord:
    stamp = iso(T0) or ""
    return CronRecord(
        cron_id=cron_id,
        owner=owner,
        assistant_id="studio",
        thread_id=None,
        schedule="* * * * *",
        timezone=None,
        payload={"input": {"request": "x"}},
        created_at=stamp,
        updated_at=stamp,
        next_run_at=iso(T0 + timedelta(minutes=1)),
    )


async def test_crons_and_assistants_stop_at_their_quota(opened: Opened) -> None:
    from engine.assistants import AssistantRecord

    where = opened.where
    if where.startswith("postgresql://"):
        from engine.postgres.assistants import PostgresAssistantRepository
        from engine.postgres.crons import PostgresCronRepository

        crons: Any = PostgresCronRepository(opened.storage.pool)
        assistants: Any = PostgresAssistantRepository(opened.storage.pool)
    else:
        from engine.sqlite.assistants import SqliteAssistantRepository
        from engine.sqlite.crons import SqliteCronRepository

        crons = SqliteCronRepository(opened.storage.database)
        assistants = SqliteAssistantRepository(opened.storage.database)

    for i in range(3):
        await crons.insert(_cron(f"c{i}"), limit=3)
    await crons.insert(_cron("bob-c", owner="bob"), limit=3)
    with pytest.raises(QuotaExceeded, match=r"quota crons \(3\) reached; retry in 60 s"):
        await crons.insert(_cron("c3"), limit=3)
    assert await crons.get("alice", "c3") is None
    assert await crons.count("alice") == 3
    await crons.delete("alice", "c0")
    await crons.insert(_cron("c4"), limit=3)  # room again

    def preset(assistant_id: str) -> AssistantRecord:
        return AssistantRecord(
            assistant_id=assistant_id,
            owner="alice",
            graph_id="studio",
            version=1,
            name=assistant_id,
            description=None,
            config={},
            context={},
            metadata={},
            created_at=now(),
            updated_at=now(),
        )

    await assistants.insert(preset("a1"), limit=1)
    with pytest.raises(QuotaExceeded) as refused:
        await assistants.insert(preset("a2"), limit=1)
    assert refused.value.quota == "assistants"
    assert await assistants.get("alice", "a2") is None
    await assistants.insert(preset("a3"))  # no limit given: none


# --------------------------------------------------------------------------- usage


async def test_the_months_usage_sums_its_runs_by_assistant_and_unknown_is_never_zero(
    opened: Opened,
) -> None:
    quotas = _quotas(opened)
    stamp = now()
    rows = [
        ("u1", "studio", RunUsage(calls=4, prompt_tokens=100, completion_tokens=10, cost=0.25)),
        ("u2", "studio", RunUsage(calls=2, prompt_tokens=50, completion_tokens=5, cost=0.5)),
        ("u3", "preset", RunUsage(calls=1, prompt_tokens=None, completion_tokens=None, cost=None)),
        ("u4", "preset", RunUsage(calls=0, prompt_tokens=None, completion_tokens=None, cost=0.0)),
    ]
    for run_id, assistant_id, usage in rows:
        usage = dataclasses.replace(usage, currency="CNY")
        await _record_usage(opened, RunUsageRecorded(run_id, "alice", assistant_id, stamp, usage))
    await _record_usage(
        opened, RunUsageRecorded("b1", "bob", "studio", stamp, RunUsage(calls=1, cost=9.0))
    )

    month = dict(await quotas.month("alice", month_start(datetime.now(UTC)), "CNY"))

    studio, preset = month["studio"], month["preset"]
    assert (studio.runs, studio.calls, studio.prompt_tokens) == (2, 6, 150)
    assert studio.cost == pytest.approx(0.75) and studio.unknown_cost_runs == 0
    assert preset.runs == 2 and preset.unknown_cost_runs == 1
    assert preset.cost is None and preset.known_cost == 0.0  # unknown, not 0
    assert preset.prompt_tokens is None  # no run of it reported tokens
    assert await quotas.month("alice", next_month(datetime.now(UTC)), "CNY") == []
    # Priced in another currency than the deployment's: unknown too.
    in_usd = dict(await quotas.month("alice", month_start(datetime.now(UTC)), "USD"))
    assert in_usd["studio"].cost is None and in_usd["studio"].unknown_cost_runs == 2


def _quotas(opened: Opened, store: Any = None) -> Any:
    if opened.where.startswith("postgresql://"):
        from engine.postgres.quotas import PostgresQuotas

        return PostgresQuotas(opened.storage.pool)
    from engine.sqlite.quotas import SqliteQuotas

    return SqliteQuotas(opened.storage.database, store)


# --------------------------------------------------------------------------- the Store


@pytest.fixture(params=["sqlite", "postgres"])
async def limited(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Yield (root store, limits) of each backend: quotas counted, searches ranked apart.

    Searches are counted in one calendar minute whatever the time (a fixed clock): the
    first one also starts the ranking process, which may take seconds.
    """
    limits: dict[str, Limits] = {"owner": Limits(store_bytes=2_000, store_searches_per_minute=3)}

    async def limits_for(_owner: str) -> Limits:
        return limits["owner"]

    if request.param == "sqlite":
        from engine.sqlite import SqliteRunStorage
        from engine.sqlite.quotas import SqliteQuotas
        from engine.sqlite.store import SqliteStoreReader, open_sqlite_store

        async with (
            SqliteRunStorage(str(tmp_path / "atelier.db")) as storage,
            open_sqlite_store(tmp_path / "store.db") as inner,
        ):
            quotas = SqliteQuotas(storage.database, inner, clock=lambda: T0)
            await quotas.setup()
            reader = SqliteStoreReader(tmp_path / "store.db")
            root = ScopedStore(
                inner, KeywordRanker(), quotas=quotas, limits=limits_for, reader=reader
            )
            yield root, limits
            await root.close()
        return
    url = request.getfixturevalue("migrated_postgres_url")
    from engine.postgres.pool import open_pool
    from engine.postgres.quotas import PostgresQuotas
    from engine.postgres.store import PostgresStoreReader, open_postgres_store

    pool = await open_pool(url, max_size=6)
    try:
        async with open_postgres_store(pool) as inner:
            root = ScopedStore(
                inner,
                KeywordRanker(),
                quotas=PostgresQuotas(pool, clock=lambda: T0),
                limits=limits_for,
                reader=PostgresStoreReader(url),
            )
            yield root, limits
            await root.close()
    finally:
        await pool.close()


async def test_a_put_past_store_bytes_is_refused_and_stores_nothing(limited: Any) -> None:
    root, _ = limited
    alice = root.for_owner("key_alice")
    await alice.aput(("notes",), "a", {"text": "x" * 900})  # ~912 bytes as JSON
    await alice.aput(("notes",), "b", {"text": "y" * 900})

    with pytest.raises(QuotaExceeded) as refused:
        await alice.aput(("notes",), "c", {"text": "z" * 900})

    assert refused.value.quota == "store_bytes" and refused.value.status == 429
    assert await alice.aget(("notes",), "c") is None
    # Replacing an item counts its new size only; deleting one frees its bytes.
    await alice.aput(("notes",), "a", {"text": "x" * 950})
    await alice.adelete(("notes",), "b")
    await alice.aput(("notes",), "c", {"text": "z" * 900})
    # Another key has bytes of its own.
    await root.for_owner("key_bob").aput(("notes",), "a", {"text": "q" * 1500})


async def test_a_ranked_search_is_ranked_apart_and_counted(limited: Any) -> None:
    root, limits = limited
    alice = root.for_owner("key_alice")
    limits["owner"] = Limits(store_searches_per_minute=3)
    await alice.aput(("brand-a",), "skin", {"text": "平价护肤清单"}, ttl=60)
    await alice.aput(("brand-a",), "both", {"text": "学生党平价护肤"})
    await alice.aput(("brand-a",), "coffee", {"text": "手冲咖啡"})

    found = await alice.asearch(("brand-a",), query="学生党平价护肤")

    # The whole query first, then a part of it; the coffee note matches nothing.
    assert [(i.key, i.namespace) for i in found] == [("both", ("brand-a",)), ("skin", ("brand-a",))]
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score
    paged = await alice.asearch(("brand-a",), query="学生党平价护肤", offset=1)
    assert [i.key for i in paged] == ["skin"]
    assert [i.key for i in await alice.asearch(("brand-a",), query="咖啡")] == ["coffee"]
    with pytest.raises(QuotaExceeded) as refused:  # the fourth of the minute
        await alice.asearch(("brand-a",), query="咖啡")
    assert refused.value.quota == "store_searches_per_minute"
    assert len(await alice.asearch(("brand-a",))) == 3  # a search without a query: not counted
    with pytest.raises(Invalid, match=f"at most {MAX_QUERY_CHARS} characters"):
        await root.for_owner("key_bob").asearch(("brand-a",), query="护" * (MAX_QUERY_CHARS + 1))
