"""The webhook outbox of both backends: queued with a run's end, claimed once at a time.

PostgreSQL runs on the throwaway server (tests/support/servers.py); two deliverers are
two storages on their own pools, as two worker processes would be. A real `Deliverer`
works each backend's outbox through rows an older version wrote with URLs it cannot
send, and through errors nobody expected: every delivery ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import outbound
from engine.postgres import PostgresRunStorage
from engine.postgres.pool import AsyncPool, open_pool
from engine.records import Frame, RunStatusChange, WebhookQueued
from engine.serde import loads
from engine.sqlite import SqliteRunStorage
from engine.webhooks import (
    Attempt,
    Deliverer,
    DeliveryStore,
    WebhookConfig,
    enqueue_delivery,
    send,
)
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


# --------------------------------------------------------------------------- every delivery ends

#: URLs older versions accepted at creation and then could not send (issue 33).
OLD_BAD_URLS = [
    "https://999.1.1.1/h",
    "https://hooks.example.com/h\tx",
    "https://hooks.example.com/h\nx",
    "https://xn--a.com/h",
    "https://a..b.com/h",
    "https://2130706433/h",
    "https://0x7f000001/h",
    "https://127.1/h",
    "https://[2002:7f00:1::]/h",
]
#: Quick retries, so a test sees a delivery through all its attempts.
QUICK = WebhookConfig(max_attempts=3, backoff=0.05, poll_interval=0.05)


def queue_old_rows(storage: SqliteRunStorage | PostgresRunStorage, urls: list[str]) -> list[str]:
    """Queue a delivery to each URL as an older version did (no check); return the run ids."""
    run_ids = [f"old-{number}" for number in range(len(urls))]
    for run_id, url in zip(run_ids, urls, strict=True):
        storage.events.record(WebhookQueued(f"d-{run_id}", run_id, "t1", "alice", url, "{}"))
    return run_ids


async def settle(store: DeliveryStore, config: WebhookConfig, run_ids: list[str]) -> list[Any]:
    """Run a real deliverer until none of the runs' deliveries is pending; return them."""
    deliverer = Deliverer(store, config)
    await deliverer.start()
    try:
        async with asyncio.timeout(20):
            while True:
                shown = [d for run_id in run_ids for d in await store.for_run(run_id)]
                if len(shown) == len(run_ids) and all(d["status"] != "pending" for d in shown):
                    return shown
                await asyncio.sleep(0.05)
    finally:
        await deliverer.stop()


def failing_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every lookup fail with an error no handler of httpx's knows."""

    async def resolve(host: str, port: int) -> list[Any]:
        raise RuntimeError("resolver exploded at /srv/internal")

    monkeypatch.setattr(outbound, "resolve", resolve)


def assert_every_delivery_ended(shown: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    for delivery in shown:
        assert delivery["status"] == "failed", delivery
        assert delivery["attempts"] == len(delivery["history"]) >= 1
        assert delivery["last_error"] == delivery["history"][-1]["error"]
    assert "could not read the outbox" not in caplog.text


async def test_sqlite_rows_an_older_version_could_not_send_end_failed_with_the_rule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with SqliteRunStorage(str(tmp_path / "atelier.db")) as storage:
        run_ids = queue_old_rows(storage, OLD_BAD_URLS)
        await storage.events.flush()
        shown = await settle(storage.deliveries, QUICK, run_ids)
    assert_every_delivery_ended(shown, caplog)
    for delivery in shown:
        (attempt,) = delivery["history"]
        assert attempt["outcome"] == "refused" and attempt["error"].startswith("refused: ")


async def test_postgres_rows_an_older_version_could_not_send_end_failed_with_the_rule(
    stores: tuple[PostgresRunStorage, PostgresRunStorage], caplog: pytest.LogCaptureFixture
) -> None:
    storage = stores[0]
    run_ids = queue_old_rows(storage, OLD_BAD_URLS)
    await storage.events.flush()
    shown = await settle(storage.deliveries, QUICK, run_ids)
    assert_every_delivery_ended(shown, caplog)
    assert {d["history"][0]["outcome"] for d in shown} == {"refused"}


async def test_sqlite_an_unexpected_error_is_retried_then_fails_like_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failing_resolver(monkeypatch)
    caplog.set_level(logging.WARNING)
    async with SqliteRunStorage(str(tmp_path / "atelier.db")) as storage:
        run_ids = queue_old_rows(storage, [URL])
        await storage.events.flush()
        (delivery,) = await settle(storage.deliveries, QUICK, run_ids)
    assert_every_delivery_ended([delivery], caplog)
    assert [a["outcome"] for a in delivery["history"]] == ["network_error"] * 3
    assert delivery["last_error"] == "sending failed (RuntimeError)"  # no internals


async def test_postgres_an_unexpected_error_is_retried_then_fails_like_any_other(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing_resolver(monkeypatch)
    storage = stores[0]
    run_ids = queue_old_rows(storage, [URL])
    await storage.events.flush()
    (delivery,) = await settle(storage.deliveries, QUICK, run_ids)
    assert_every_delivery_ended([delivery], caplog)
    assert [a["outcome"] for a in delivery["history"]] == ["network_error"] * 3


async def test_postgres_records_an_answer_with_nul_bytes(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    """PostgreSQL's text refuses NUL: an attempt that kept one could never be recorded."""
    storage = stores[0]
    storage.events.record(queued(1))
    await storage.events.flush()
    (claimed,) = await storage.deliveries.claim("w1", 10, 30)
    answer = httpx.Response(500, content=b"\x00bad\x00")
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: answer)) as client:
        attempt = await send(client, WebhookConfig(), claimed, 1)
    assert await storage.deliveries.record(claimed, attempt, worker="w1", retry_in=None)
    (shown,) = await storage.deliveries.for_run("r1")
    assert shown["history"][0]["response_excerpt"] == "\ufffdbad\ufffd"
