"""The webhook outbox of both backends: queued with a run's end, claimed once at a time.

PostgreSQL runs on the throwaway server (tests/support/servers.py); two deliverers are
two storages on their own pools, as two worker processes would be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.postgres import PostgresRunStorage
from engine.postgres.pool import AsyncPool, open_pool
from engine.records import Frame, RunStatusChange, WebhookQueued
from engine.serde import loads
from engine.sqlite import SqliteRunStorage
from engine.webhooks import Attempt, enqueue_delivery
from tests.engine.factories import run, thread

URL = "https://hooks.example.com/in"


def queued(number: int) -> WebhookQueued:
    return WebhookQueued(f"d{number}", f"r{number}", "t1", "alice", URL, f'{{"n": {number}}}')


def attempt(number: int, outcome: str = "http_error") -> Attempt:
    return Attempt(number, "2026-11-26T10:00:00+00:00", outcome, 12.5, 500, "HTTP 500", "no")  # type: ignore[arg-type]


@pytest.fixture
async def pools(migrated_postgres_url: str) -> AsyncIterator[tuple[AsyncPool, AsyncPool]]:
    first = await open_pool(migrated_postgres_url, max_size=4)
    second = await open_pool(migrated_postgres_url, max_size=4)
    async with first.connection() as conn:
        await conn.execute("DELETE FROM webhook_deliveries")
    yield first, second
    await first.close()
    await second.close()


@pytest.fixture
async def stores(
    pools: tuple[AsyncPool, AsyncPool],
) -> AsyncIterator[tuple[PostgresRunStorage, PostgresRunStorage]]:
    async with PostgresRunStorage(pools[0]) as a, PostgresRunStorage(pools[1]) as b:
        yield a, b


async def test_postgres_deliverers_never_hold_one_delivery_at_once(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    for number in range(6):
        a.events.record(queued(number))
        a.events.record(queued(number))  # queued twice: kept once
    await a.events.flush()
    first, second = await asyncio.gather(
        a.deliveries.claim("w1", 4, 30), b.deliveries.claim("w2", 10, 30)
    )
    ids = [d.delivery_id for d in first + second]
    assert sorted(ids) == [f"d{n}" for n in range(6)]  # each once, by one of them
    assert await b.deliveries.claim("w2", 10, 30) == []
    holder, other = ("w1", "w2") if first else ("w2", "w1")  # b may have claimed first
    held = (first + second)[0]
    assert not await b.deliveries.record(held, attempt(1), worker=other, retry_in=0)
    assert await a.deliveries.record(held, attempt(1), worker=holder, retry_in=0.05)
    await asyncio.sleep(0.1)
    (again,) = await b.deliveries.claim("w2", 10, 30)
    assert again.delivery_id == held.delivery_id and again.attempts == 1
    (shown,) = await a.deliveries.for_run(held.run_id)
    assert shown["status"] == "pending" and shown["attempts"] == 1
    assert shown["history"][0]["status_code"] == 500 and shown["last_error"] == "HTTP 500"


async def test_postgres_a_lapsed_lease_lets_another_deliverer_resume(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    a.events.record(queued(1))
    await a.events.flush()
    (claimed,) = await a.deliveries.claim("w1", 10, 0.1)
    assert await b.deliveries.claim("w2", 10, 30) == []
    await asyncio.sleep(0.3)  # w1 stopped without a word
    (resumed,) = await b.deliveries.claim("w2", 10, 30)
    assert resumed.delivery_id == claimed.delivery_id
    assert await b.deliveries.record(resumed, attempt(1, "success"), worker="w2", retry_in=None)
    assert not await a.deliveries.record(claimed, attempt(1), worker="w1", retry_in=1)
    (shown,) = await a.deliveries.for_run("r1")
    assert shown["status"] == "success" and shown["next_attempt_at"] is None


async def test_postgres_the_sweep_reports_a_run_it_abandons(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    await a.threads.insert(thread("tw"))
    record = run("rw", "tw")
    record.options = dataclasses.replace(record.options, webhook=URL)
    await a.runs.insert(record, exclusive=True)
    claim = await a.runs.claim("w1", 0.1)
    assert claim is not None
    a.events.hold(claim.lease)
    a.events.append("rw", Frame(1, "metadata", "{}"))
    a.events.record(RunStatusChange("rw", "running", attempt=1), run_id="rw")
    await a.events.flush("rw")
    await asyncio.sleep(0.4)
    assert list((await b.runs.sweep(max_attempts=1)).abandoned) == ["rw"]
    (claimed,) = await b.deliveries.claim("w2", 10, 30)
    body = loads(claimed.body)
    assert body["run_id"] == "rw" and body["status"] == "error"
    assert body["error"]["error"] == "RunAbandoned" and body["result"] is None


async def test_sqlite_a_delivery_is_queued_with_the_runs_end_and_resumed_after_a_restart(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "atelier.db")
    async with SqliteRunStorage(path) as storage:
        await storage.threads.insert(thread())
        record = run("r1")
        record.options = dataclasses.replace(record.options, webhook=URL)
        await storage.runs.insert(record, exclusive=True)
        storage.events.record(RunStatusChange("r1", "success"), run_id="r1")
        assert enqueue_delivery(storage.events, record, status="success", result={"a": 1})
        await storage.events.flush("r1")
        (claimed,) = await storage.deliveries.claim("old", 10, 600)
        assert claimed.queued_at == pytest.approx(time.time(), abs=5)
    async with SqliteRunStorage(path) as storage:  # the owner died holding it
        assert await storage.deliveries.claim("new", 10, 30) == []
        await storage.deliveries.clear_leases()
        (resumed,) = await storage.deliveries.claim("new", 10, 30)
        assert loads(resumed.body)["result"] == {"a": 1}
        assert await storage.deliveries.record(resumed, attempt(1), worker="new", retry_in=None)
        (shown,) = await storage.deliveries.for_run("r1")
        assert shown["status"] == "failed" and len(shown["history"]) == 1
        assert await storage.deliveries.claim("new", 10, 30) == []
