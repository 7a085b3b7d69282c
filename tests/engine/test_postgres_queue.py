"""The runs table as the queue: claims, leases with fencing, the sweep, cancel requests.

Against a real PostgreSQL (tests/support/servers.py); two "workers" are two owners
claiming through their own pools, as two processes would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from engine.postgres import PostgresRunStorage
from engine.postgres.pool import AsyncPool, open_pool
from engine.postgres.worker import CLAIM_BATCH, MAX_CLAIM_BATCH, next_claim_batch
from engine.protocols import StoreError
from engine.records import Frame, RunStatusChange, ThreadStateChange
from tests.engine.factories import run, thread

LEASE = 30.0


@pytest.fixture
async def pools(migrated_postgres_url: str) -> AsyncIterator[tuple[AsyncPool, AsyncPool]]:
    first = await open_pool(migrated_postgres_url, max_size=4)
    second = await open_pool(migrated_postgres_url, max_size=4)
    yield first, second
    await first.close()
    await second.close()


@pytest.fixture
async def stores(
    pools: tuple[AsyncPool, AsyncPool],
) -> AsyncIterator[tuple[PostgresRunStorage, PostgresRunStorage]]:
    async with PostgresRunStorage(pools[0]) as a, PostgresRunStorage(pools[1]) as b:
        yield a, b


async def _running_per_thread(store: PostgresRunStorage) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in await store.runs.active():
        if r.status == "running":
            counts[r.thread_id] = counts.get(r.thread_id, 0) + 1
    return counts


async def test_a_claim_takes_the_oldest_pending_run_of_a_free_thread(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, _ = stores
    await a.threads.insert(thread("t1"))
    await a.threads.insert(thread("t2"))
    for run_id, thread_id in [("first", "t1"), ("queued", "t1"), ("other", "t2")]:
        assert await a.runs.insert(run(run_id, thread_id), exclusive=False)
    one = await a.runs.claim("w1", LEASE)
    two = await a.runs.claim("w1", LEASE)
    assert one is not None and two is not None
    assert (one.run.run_id, two.run.run_id) == ("first", "other")
    assert one.run.status == "running" and one.lease.epoch == 1
    assert await a.runs.claim("w1", LEASE) is None  # "queued" waits for "first"
    a.events.hold(one.lease)
    a.events.record(RunStatusChange("first", "success"), run_id="first")
    await a.events.flush("first")
    three = await a.runs.claim("w2", LEASE)
    assert three is not None and three.run.run_id == "queued"


async def test_two_claimers_never_run_two_runs_of_a_thread(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    for t in range(10):
        await a.threads.insert(thread(f"t{t}"))
        for n in range(3):
            await a.runs.insert(run(f"r{t}-{n}", f"t{t}"), exclusive=False)

    async def claim_all(store: PostgresRunStorage, owner: str) -> list[str]:
        claimed = []
        while (claim := await store.runs.claim(owner, LEASE)) is not None:
            claimed.append(claim.run.run_id)
        return claimed

    first, second = await asyncio.gather(claim_all(a, "w1"), claim_all(b, "w2"))
    assert not set(first) & set(second)
    assert sorted(first + second) == [f"r{t}-0" for t in range(10)]  # the oldest of each
    assert set((await _running_per_thread(a)).values()) == {1}


async def test_a_batch_claim_takes_the_oldest_run_of_each_free_thread_in_order(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    for t in range(6):
        await a.threads.insert(thread(f"t{t}"))
    for n in range(2):  # r0-0 … r5-0, then r0-1 … r5-1, queued behind them
        for t in range(6):
            await a.runs.insert(run(f"r{t}-{n}", f"t{t}"), exclusive=False)
    await a.threads.insert(thread("busy"))
    await a.runs.insert(run("busy-0", "busy"), exclusive=False)
    running = await a.runs.claim("w0", LEASE)
    assert running is not None and running.run.run_id == "r0-0"  # the oldest of all

    batch = await a.runs.claim_many("w1", LEASE, 4)
    assert [c.run.run_id for c in batch] == ["r1-0", "r2-0", "r3-0", "r4-0"]  # oldest first
    assert all(c.run.status == "running" and c.lease.owner == "w1" for c in batch)
    rest = await b.runs.claim_many("w2", LEASE, 10)
    # no r*-1: each waits for its thread's running run; "busy-0" was queued last
    assert [c.run.run_id for c in rest] == ["r5-0", "busy-0"]
    assert set((await _running_per_thread(a)).values()) == {1}
    assert await b.runs.claim_many("w2", LEASE, 10) == []


async def test_a_worker_that_lost_its_lease_writes_nothing(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    lost: list[str] = []
    a.events.on_lost = lost.append
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    stale = await a.runs.claim("w1", 0.2)
    assert stale is not None and stale.last_id == 0  # never executed: an empty log
    a.events.hold(stale.lease)
    a.events.append("r1", Frame(1, "metadata", "{}"))
    await a.events.flush("r1")  # within its lease: written
    await asyncio.sleep(0.05)
    assert (await a.runs.renew(stale.lease, 0.2)) == (True, None)
    await asyncio.sleep(0.4)  # the worker stalls past its lease...
    swept = await b.runs.sweep(max_attempts=3)
    assert swept.requeued == ["r1"] and swept.abandoned == {}
    fresh = await b.runs.claim("w2", LEASE)  # ...and another takes the run
    assert fresh is not None and fresh.lease.epoch == stale.lease.epoch + 1
    assert fresh.last_id == 1  # the claim read where the log stops
    b.events.hold(fresh.lease)
    # The stale worker wakes up and writes: frames, its status, its thread's state.
    a.events.append("r1", Frame(2, "custom", '{"stale":true}'))
    a.events.record(RunStatusChange("r1", "success"), run_id="r1")
    a.events.record(ThreadStateChange("t1", "idle", {"stale": True}), run_id="r1")
    with pytest.raises(StoreError):
        await a.events.flush("r1")
    assert lost == ["r1"] and a.events.lease_lost("r1")
    assert await a.runs.renew(stale.lease, LEASE) == (False, None)
    assert not await a.runs.hand_back(stale.lease)
    record = await b.runs.get("r1")
    assert record is not None and record.status == "running"
    thread_now = await b.threads.get("alice", "t1")
    assert thread_now is not None and thread_now.values is None
    assert await b.events.last_id("r1") == 1
    # The new holder numbers on from the log, unhindered.
    b.events.append("r1", Frame(2, "metadata", '{"attempt":2}'))
    b.events.append("r1", Frame(3, "end", "{}"))
    b.events.record(RunStatusChange("r1", "success", attempt=2), run_id="r1")
    await b.events.flush("r1")
    assert [f.id for f in await b.events.read("r1", 0)] == [1, 2, 3]
    assert (await b.runs.get("r1")).status == "success"  # type: ignore[union-attr]


async def _run_row_versions(pool: AsyncPool) -> tuple[int, int]:
    """Return the row versions `runs` got from updates: all of them, and the HOT ones."""
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        row = await (
            await conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runs'"
            )
        ).fetchone()
    assert row is not None
    return row["n_tup_upd"], row["n_tup_hot_upd"]


async def test_appends_write_no_run_row_and_renewals_touch_no_index(
    migrated_postgres_url: str,
) -> None:
    # The two most frequent writes of a running run: a batch of frames checks and locks
    # the run's row without writing it; a lease renewal updates it in place (HOT).
    # One connection: a backend's statistics are flushed when it asks (the helper).
    pool = await open_pool(migrated_postgres_url, min_size=1, max_size=1)
    async with PostgresRunStorage(pool) as a:
        await _check_run_row_writes(a, pool)
    await pool.close()


async def _check_run_row_writes(a: PostgresRunStorage, pool: AsyncPool) -> None:
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    claim = await a.runs.claim("w1", LEASE)
    assert claim is not None
    a.events.hold(claim.lease)
    before = await _run_row_versions(pool)
    for seq in range(1, 6):
        a.events.append("r1", Frame(seq, "custom", "{}"))
        await a.events.flush("r1")
    assert await _run_row_versions(pool) == before
    for _ in range(5):
        assert await a.runs.renew(claim.lease, LEASE) == (True, None)
    updated, hot = await _run_row_versions(pool)
    assert (updated - before[0], hot - before[1]) == (5, 5)


async def test_the_lease_keeper_renews_a_lease_a_third_of_a_lease_after_its_claim(
    migrated_postgres_url: str, stores: tuple[PostgresRunStorage, PostgresRunStorage]
) -> None:
    from engine.postgres.worker import LeaseKeeper

    a, b = stores
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    await a.threads.insert(thread("t2"))
    await a.runs.insert(run("r2", "t2"), exclusive=True)
    since = time.monotonic()
    one, two = await a.runs.claim_many("w1", 1.5, 2)
    beats: list[tuple[set[str], set[str], dict[str, str]]] = []
    keeper = LeaseKeeper(
        migrated_postgres_url,
        "w1",
        lease_seconds=1.5,
        interval=0.1,
        loop=asyncio.get_running_loop(),
        on_renewal=lambda renewed, lost, cancels, _since: beats.append((renewed, lost, cancels)),
    )
    keeper.hold(one.lease, since)
    keeper.hold(two.lease, since)
    keeper.start()
    try:
        await asyncio.sleep(0.3)
        assert await b.runs.request_cancel("r2", "interrupt")  # read on the next heartbeat
        await asyncio.sleep(0.15)
        assert beats and all(renewed == set() for renewed, _, _ in beats)  # none due yet
        assert beats[-1][2] == {"r2": "interrupt"} and beats[-1][1] == set()
        await asyncio.sleep(0.4)  # 0.5 s (a third of the lease) after the claim: renewed
        assert {"r1", "r2"} <= set().union(*(renewed for renewed, _, _ in beats))
        await asyncio.sleep(1.5)  # alive well past the lease of the claim
        assert (await b.runs.sweep(max_attempts=3)).requeued == []
        assert await b.runs.hand_back(two.lease)  # gone from under the keeper: lost
        await asyncio.sleep(0.25)
        assert beats[-1][1] == {"r2"}
    finally:
        keeper.stop()


async def test_the_sweep_ends_a_run_out_of_attempts_with_error_and_end(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    claim = await a.runs.claim("w1", 0.1)
    assert claim is not None
    a.events.hold(claim.lease)
    a.events.append("r1", Frame(1, "metadata", "{}"))
    a.events.record(RunStatusChange("r1", "running", attempt=3), run_id="r1")
    await a.events.flush("r1")
    await asyncio.sleep(0.4)
    assert (await b.runs.sweep(max_attempts=4)).requeued == ["r1"]
    again = await b.runs.claim("w2", 0.1)
    assert again is not None
    b.events.hold(again.lease)
    b.events.record(RunStatusChange("r1", "running", attempt=4), run_id="r1")
    await b.events.flush("r1")
    await asyncio.sleep(0.4)
    swept = await a.runs.sweep(max_attempts=4)
    assert swept.requeued == [] and list(swept.abandoned) == ["r1"]
    frames = await a.events.read("r1", 0)
    assert [(f.id, f.event) for f in frames] == [(1, "metadata"), (2, "error"), (3, "end")]
    assert swept.abandoned["r1"] == frames[1:]
    record = await a.runs.get("r1")
    assert record is not None and record.status == "error"
    assert record.error is not None and record.error["error"] == "RunAbandoned"
    assert (await a.threads.get("alice", "t1")).status == "error"  # type: ignore[union-attr]
    assert (await a.runs.sweep(max_attempts=4)).abandoned == {}  # once


async def test_a_cancel_request_reaches_the_holder_on_renewal_and_on_append(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    seen: list[tuple[str, str]] = []
    a.events.on_cancel = lambda run_id, action: seen.append((run_id, action))
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    claim = await a.runs.claim("w1", LEASE)
    assert claim is not None and claim.cancel_requested is None
    a.events.hold(claim.lease)
    assert await b.runs.request_cancel("r1", "rollback")  # from another replica
    assert await a.runs.renew(claim.lease, LEASE) == (True, "rollback")
    a.events.append("r1", Frame(1, "metadata", "{}"))
    await a.events.flush("r1")
    assert seen == [("r1", "rollback")]
    assert not await b.runs.request_cancel("nothing", "interrupt")


async def test_a_run_handed_back_is_claimed_again_with_a_new_epoch(
    stores: tuple[PostgresRunStorage, PostgresRunStorage],
) -> None:
    a, b = stores
    await a.threads.insert(thread())
    await a.runs.insert(run("r1"), exclusive=True)
    claim = await a.runs.claim("w1", LEASE)
    assert claim is not None
    assert await a.runs.queue_depth() == 0
    assert await a.runs.hand_back(claim.lease)
    assert await a.runs.queue_depth() == 1
    again = await b.runs.claim("w2", LEASE)
    assert again is not None and again.lease.epoch == claim.lease.epoch + 1


async def test_a_waiter_whose_live_frames_lagged_does_not_spin_on_the_record() -> None:
    # Regression: a lagged subscription returns at once, forever; the waiter re-read
    # the run's record in a tight loop until the run ended.
    from types import SimpleNamespace

    from engine.hub import SUBSCRIBER_BUFFER, Hub
    from engine.postgres.queue import QueueExecutor

    class Runs:
        def __init__(self) -> None:
            self.reads = 0
            self.active = True

        async def get(self, run_id: str) -> SimpleNamespace:
            self.reads += 1
            await asyncio.sleep(0)  # a round trip to the database
            return SimpleNamespace(active=self.active)

    hub, runs = Hub(), Runs()
    waiter = object.__new__(QueueExecutor)  # only what `wait` uses
    waiter._cancels, waiter.hub, waiter.runs = {}, hub, runs  # type: ignore[assignment]
    waiting = asyncio.ensure_future(waiter.wait("r1"))
    await asyncio.sleep(0.05)
    hub.publish("r1", [Frame(i, "custom", "{}") for i in range(1, SUBSCRIBER_BUFFER + 2)])
    await asyncio.sleep(0.3)
    assert runs.reads <= 3, runs.reads  # once at the start, once for the lag
    runs.active = False
    hub.publish("r1", [Frame(SUBSCRIBER_BUFFER + 2, "end", "{}")])
    await asyncio.wait_for(waiting, 2)


def test_a_burst_is_claimed_in_batches_that_double_while_they_come_back_full() -> None:
    """300 runs queued at once, a worker with room for 150: 5 claims, not 19 of 8."""
    pending, room, batch, asks = 300, 150, CLAIM_BATCH, []
    while room > 0 and pending > 0:
        asked = min(room, batch)
        claimed = min(asked, pending)
        asks.append(asked)
        pending, room = pending - claimed, room - claimed
        batch = next_claim_batch(batch, asked, claimed)
    assert asks == [8, 16, 32, 64, 30]
    assert next_claim_batch(16, 16, 5) == 16  # the queue ran dry: no bigger claim
    assert next_claim_batch(MAX_CLAIM_BATCH, MAX_CLAIM_BATCH, MAX_CLAIM_BATCH) == MAX_CLAIM_BATCH
