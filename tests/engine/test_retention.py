"""Retention in the engine: thread TTLs, their claims, the sweep, prunes and ended deliveries.

The claims are tested on each backend's repository (SQLite always, PostgreSQL when it
can): who may take an expired thread, and that two sweeps taking at once never share
one. The sweep, `keep_latest` and prunes run through the engine's own opener on real
graphs (tests/app/sample_graphs.py) and the scripted LLM, embedded and scale-out (the
API and a worker in this process, on the throwaway PostgreSQL and Redis); the sweep's
time is given, never waited for.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentkit.services import build_context
from app.composition import KeywordRanker
from engine import Engine, NotFound, RunSpec, ThreadTTL, open_engine
from engine.records import ThreadStateChange, WebhookQueued, now
from engine.retention import SWEEP_LEASE, RetentionRepository
from engine.services import retention as retention_service
from engine.webhooks import Attempt
from providers.llm import OpenAIModelFactory
from tests.app.harness import service_settings
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread
from tests.support.scripted_openai import ScriptedOpenAIServer

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
OWNER = "key_alice"


def retention_of(opened: Opened) -> RetentionRepository:
    """Return the retention repository on the storage's database."""
    storage = opened.storage
    if opened.where.startswith("postgresql://"):
        from engine.postgres.retention import PostgresRetention

        return PostgresRetention(storage.pool)
    from engine.sqlite.retention import SqliteRetention

    return SqliteRetention(storage.database)


def expiring(
    thread_id: str, minutes: float = 1, strategy: str = "delete", owner: str = OWNER
) -> Any:
    """Return a thread whose TTL of `minutes` counts from T0."""
    record = thread(thread_id, owner)
    record.ttl = ThreadTTL(strategy, minutes).starting(T0)  # type: ignore[arg-type]
    return record


# --------------------------------------------------------------------------- claims


async def test_an_expired_idle_thread_is_claimed_by_one_sweep_at_a_time(opened: Opened) -> None:
    storage, retention = opened.storage, retention_of(opened)
    await storage.threads.insert(expiring("soon"))
    await storage.threads.insert(expiring("later", minutes=60))
    await storage.threads.insert(thread("forever"))
    await storage.threads.insert(expiring("busy"))
    assert await storage.runs.insert(run("r-busy", "busy"), exclusive=True)

    assert await retention.claim_expired("a", T0 + timedelta(seconds=30), 10, 60) == []
    due = T0 + timedelta(minutes=2)
    (claimed,) = await retention.claim_expired("a", due, 10, 60)
    assert (claimed.thread_id, claimed.owner, claimed.strategy) == ("soon", OWNER, "delete")
    assert await retention.claim_expired("b", due, 10, 60) == []  # "a" holds it
    assert await retention.holds("a", "soon", due)
    assert not await retention.holds("b", "soon", due)
    assert not await retention.holds("a", "soon", T0)  # not expired at that time

    # "a" died: once its lease ran out, "b" takes the thread.
    after_lease = due + timedelta(seconds=61)
    assert [t.thread_id for t in await retention.claim_expired("b", after_lease, 10, 60)] == [
        "soon"
    ]
    assert not await retention.rearm("a", "soon", after_lease)  # no longer a's
    assert await retention.rearm("b", "soon", after_lease)
    rearmed = await storage.threads.get(OWNER, "soon")
    assert rearmed.ttl is not None and rearmed.ttl.strategy == "delete"
    expires = datetime.fromisoformat(rearmed.ttl.expires_at or "")
    assert abs(expires - (after_lease + timedelta(minutes=1))) < timedelta(seconds=1)
    assert await retention.claim_expired("b", after_lease, 10, 60) == []  # counts again


async def test_two_sweeps_claiming_together_never_share_a_thread(opened: Opened) -> None:
    storage, retention = opened.storage, retention_of(opened)
    ids = [f"t{i:02d}" for i in range(40)]
    for thread_id in ids:
        await storage.threads.insert(expiring(thread_id))
    due = T0 + timedelta(minutes=5)
    claims = await asyncio.gather(
        *(retention.claim_expired(f"sweep-{n}", due, 15, SWEEP_LEASE) for n in range(4))
    )
    taken = [t.thread_id for claim in claims for t in claim]
    assert sorted(taken) == ids  # every one, each once
    assert await retention.claim_expired("late", due, 100, SWEEP_LEASE) == []


async def test_a_new_ttl_or_a_runs_activity_voids_a_claim(opened: Opened) -> None:
    storage, retention = opened.storage, retention_of(opened)
    await storage.threads.insert(expiring("patched"))
    await storage.threads.insert(expiring("used"))
    due = datetime.now(UTC) + timedelta(minutes=5)
    assert len(await retention.claim_expired("a", due, 10, 60)) == 2
    patched = await storage.threads.merge_metadata(
        OWNER, "patched", {}, ThreadTTL("keep_latest", 30).starting()
    )
    assert patched is not None and patched.ttl is not None
    assert patched.ttl.strategy == "keep_latest" and patched.ttl.minutes == 30
    assert not await retention.holds("a", "patched", due)  # released, and not expired
    assert not await retention.holds("a", "patched", due + timedelta(hours=1))
    # A run's start or end on the thread counts its TTL again from then.
    storage.events.record(ThreadStateChange("used", "busy"))
    await storage.events.flush()
    assert not await retention.holds("a", "used", T0 + timedelta(minutes=2))
    used = await storage.threads.get(OWNER, "used")
    assert used is not None and used.ttl is not None
    moved = datetime.fromisoformat(used.ttl.expires_at or "")
    assert abs(moved - (datetime.now(UTC) + timedelta(minutes=1))) < timedelta(seconds=5)


async def test_threads_without_a_ttl_keep_none_and_old_rows_read(opened: Opened) -> None:
    storage = opened.storage
    await storage.threads.insert(thread("plain"))
    plain = await storage.threads.get("alice", "plain")
    assert plain is not None and plain.ttl is None
    assert "ttl" not in plain.to_json() and plain.to_json(include_ttl=True)["ttl"] is None
    storage.events.record(ThreadStateChange("plain", "idle"))
    await storage.events.flush()
    again = await storage.threads.get("alice", "plain")
    assert again is not None and again.ttl is None


# --------------------------------------------------------------------------- deliveries


def queued(delivery_id: str) -> WebhookQueued:
    return WebhookQueued(
        delivery_id=delivery_id,
        run_id=f"run-{delivery_id}",
        thread_id="t1",
        owner=OWNER,
        url="https://hooks.example.com/in",
        body='{"status":"success"}',
    )


async def test_ended_deliveries_are_pruned_after_their_age_and_pending_ones_never(
    opened: Opened,
) -> None:
    storage = opened.storage
    outbox = storage.deliveries
    for delivery_id in ("delivered", "failed", "pending"):
        storage.events.record(queued(delivery_id))
    await storage.events.flush()
    claimed = {d.delivery_id: d for d in await outbox.claim("w", 10, 60)}
    assert claimed["delivered"].owner == OWNER  # the deliverer signs with the owner's secret
    ok = Attempt(1, now(), "success", 3.0, status_code=200)
    gone = Attempt(1, now(), "http_error", 3.0, status_code=410, error="HTTP 410")
    assert await outbox.record(claimed["delivered"], ok, worker="w", retry_in=None)
    assert await outbox.record(claimed["failed"], gone, worker="w", retry_in=None)
    await outbox.release("w")

    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    assert await outbox.prune(an_hour_ago) == 0  # both ended moments ago
    assert await outbox.prune(datetime.now(UTC) + timedelta(hours=1)) == 2
    totals = await outbox.totals()
    assert totals.deliveries == {"pending": 1, "success": 0, "failed": 0, "cancelled": 0}
    assert sum(totals.attempts.values()) == 0  # their attempts went with them
    assert await outbox.for_run("run-delivered") == []
    (pending,) = await outbox.for_run("run-pending")
    assert pending["status"] == "pending"
    assert await outbox.prune(datetime.now(UTC) + timedelta(days=365)) == 0


# --------------------------------------------------------------------------- the sweep


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@asynccontextmanager
async def fixed_context(context: Any) -> AsyncIterator[Any]:
    yield context


@asynccontextmanager
async def engine_on(data_dir: Path, llm_url: str, **settings: Any) -> AsyncIterator[Engine]:
    """Open the engine (`role="serve"`; no sweep of its own: the tests sweep)."""
    values = service_settings(data_dir, llm_url, retention_sweep_minutes=0, **settings)
    context = build_context(values, models=OpenAIModelFactory(values))
    async with open_engine(
        values,
        role="serve",
        assistants=sample_assistants,
        context=lambda _pools: fixed_context(context),
        ranker=KeywordRanker(),
    ) as engine:
        yield engine


@pytest.fixture(params=["embedded", "scale-out"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings of each deployment's backend (scale-out: this process runs a worker)."""
    if request.param == "embedded":
        return {}
    return {
        "database_url": request.getfixturevalue("migrated_postgres_url"),
        "redis_url": request.getfixturevalue("redis_server").url,
    }


async def finish(engine: Engine, thread_id: str, assistant: str, graph_input: Any) -> str:
    """Run an assistant on the owner's thread to its end; return the run's id."""
    created, _ = await engine.runs.create(
        RunSpec(
            assistant_id=assistant,
            owner=OWNER,
            thread_id=thread_id,
            input=graph_input,
            if_not_exists="create",
        )
    )
    await engine.runs.join(created.run_id)
    return created.run_id


async def test_a_thread_with_a_one_minute_ttl_is_gone_after_the_sweep(
    tmp_path: Path, llm: ScriptedOpenAIServer, backend: dict[str, Any]
) -> None:
    async with engine_on(tmp_path, llm.base_url, **backend) as engine:
        threads = engine.threads
        await threads.create(OWNER, "short", {}, ttl=ThreadTTL("delete", 1))
        await threads.create(OWNER, "long", {}, ttl=ThreadTTL("delete", 120))
        await threads.create(OWNER, "kept", {})
        await threads.create("key_bob", "bobs", {}, ttl=ThreadTTL("delete", 1))
        run_id = await finish(engine, "short", "slow", {"steps": 2, "delay": 0.01})
        core = engine.core
        assert await core.events.last_id(run_id) > 0
        assert await core.checkpointer.aget_tuple(thread_config("short")) is not None

        assert (await engine.retention.sweep(datetime.now(UTC))).deleted == []  # not yet
        report = await engine.retention.sweep(datetime.now(UTC) + timedelta(minutes=2))
        assert sorted(report.deleted) == ["bobs", "short"] and report.kept_latest == []
        with pytest.raises(NotFound):
            await threads.get(OWNER, "short")
        with pytest.raises(NotFound):
            await engine.runs.get(OWNER, "short", run_id)
        assert await core.runs.get(run_id) is None
        assert await core.events.last_id(run_id) == 0
        assert await core.checkpointer.aget_tuple(thread_config("short")) is None
        assert (await threads.get(OWNER, "long")).ttl is not None
        assert (await threads.get(OWNER, "kept")).ttl is None
        again = await engine.retention.sweep(datetime.now(UTC) + timedelta(minutes=2))
        assert again.deleted == []  # nothing is swept twice


def thread_config(thread_id: str, ns: str = "") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


async def checkpoints_of(engine: Engine, thread_id: str) -> list[Any]:
    """Return every checkpoint of a thread, subgraphs' too."""
    saver = engine.core.checkpointer
    return [c async for c in saver.alist({"configurable": {"thread_id": thread_id}})]


async def test_keep_latest_keeps_the_state_and_the_thread_usable(
    tmp_path: Path, llm: ScriptedOpenAIServer, backend: dict[str, Any]
) -> None:
    async with engine_on(tmp_path, llm.base_url, **backend) as engine:
        threads = engine.threads
        await threads.create(OWNER, "chat", {}, ttl=ThreadTTL("keep_latest", 1))
        first = await finish(engine, "chat", "slow", {"steps": 2, "delay": 0.01})
        await finish(engine, "chat", "slow", {"steps": 3, "delay": 0.01})
        before = await threads.state(OWNER, "chat")
        assert before["values"]["done"] == [1, 2, 3]
        assert len(await checkpoints_of(engine, "chat")) > 3

        swept_at = datetime.now(UTC) + timedelta(minutes=2)
        report = await engine.retention.sweep(swept_at)
        assert report.kept_latest == ["chat"] and report.deleted == []
        after = await threads.state(OWNER, "chat")
        assert after["values"] == before["values"]
        assert after["checkpoint"] == before["checkpoint"]
        (only,) = await checkpoints_of(engine, "chat")
        assert only.parent_config is None
        assert len(await threads.history(OWNER, "chat", limit=10)) == 1
        assert [r.run_id for r in await engine.runs.for_thread(OWNER, "chat")][-1] == first
        # Its TTL counts again from the sweep; the thread is not swept again meanwhile.
        ttl = (await threads.get(OWNER, "chat")).ttl
        assert ttl is not None and ttl.strategy == "keep_latest"
        assert datetime.fromisoformat(ttl.expires_at or "") > swept_at
        assert (await engine.retention.sweep(swept_at)).kept_latest == []
        # A new run continues from the state kept.
        await finish(engine, "chat", "slow", {"steps": 4, "delay": 0.01})
        assert (await threads.state(OWNER, "chat"))["values"]["done"] == [1, 2, 3, 4]


async def test_keep_latest_drops_finished_subgraph_calls_and_keeps_a_pending_interrupt(
    tmp_path: Path, llm: ScriptedOpenAIServer, backend: dict[str, Any]
) -> None:
    async with engine_on(tmp_path, llm.base_url, **backend) as engine:
        threads = engine.threads
        await finish(engine, "done", "studio", {"request": "a post", "auto_confirm": True})
        namespaces = {
            c.config["configurable"]["checkpoint_ns"] for c in await checkpoints_of(engine, "done")
        }
        assert any(ns.startswith("executor:") for ns in namespaces)  # the finished call's
        finished = await threads.state(OWNER, "done")
        assert await threads.prune(OWNER, ["done"], "keep_latest") == 1
        kept = await checkpoints_of(engine, "done")
        assert [c.config["configurable"]["checkpoint_ns"] for c in kept] == [""]
        assert (await threads.state(OWNER, "done"))["values"] == finished["values"]

        await finish(engine, "asks", "studio", {"request": "another post"})  # a question
        waiting = await threads.state(OWNER, "asks")
        assert waiting["next"] == ["planner"] and waiting["tasks"][0]["interrupts"]
        assert await threads.prune(OWNER, ["asks"], "keep_latest") == 1
        assert len(await checkpoints_of(engine, "asks")) == 1
        pruned = await threads.state(OWNER, "asks")
        assert pruned["values"] == waiting["values"] and pruned["next"] == ["planner"]
        assert pruned["tasks"][0]["interrupts"] == waiting["tasks"][0]["interrupts"]
        # The question is still answerable: the run resumes from the state kept.
        created, _ = await engine.runs.create(
            RunSpec(
                assistant_id="studio",
                owner=OWNER,
                thread_id="asks",
                command={"resume": "defaults"},
            )
        )
        await engine.runs.join(created.run_id)
        done = await threads.state(OWNER, "asks")
        assert done["values"]["result"]["outcome"] == "completed"


async def test_prune_acts_on_exactly_the_callers_threads_it_names(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    async with engine_on(tmp_path, llm.base_url) as engine:
        threads = engine.threads
        for thread_id in ("t1", "t2", "t3"):
            await threads.create(OWNER, thread_id, {})
        await threads.create("key_bob", "t4", {})
        await finish(engine, "t1", "slow", {"steps": 1, "delay": 0.01})
        named = ["t1", "t3", "t4", "nope", "t1"]
        assert await threads.prune(OWNER, named, "delete") == 2
        left = {t.thread_id for t in await threads.search(OWNER, limit=10)}
        assert left == {"t2"}
        assert (await threads.get("key_bob", "t4")).thread_id == "t4"
        assert await threads.prune(OWNER, ["t1", "t3"], "delete") == 0  # gone already
        # keep_latest skips a thread with an active run (and does not count it).
        busy, _ = await engine.runs.create(
            RunSpec(
                assistant_id="slow", owner=OWNER, thread_id="t2", input={"steps": 1, "delay": 2}
            )
        )
        assert await threads.prune(OWNER, ["t2"], "keep_latest") == 0
        await engine.runs.cancel(busy, "interrupt", wait=True)
        assert await threads.prune(OWNER, ["t2"], "keep_latest") == 1


async def test_the_default_ttl_applies_to_new_threads_runs_create_too(
    tmp_path: Path, llm: ScriptedOpenAIServer, backend: dict[str, Any]
) -> None:
    defaults = {"thread_ttl_minutes": 30, "thread_ttl_strategy": "keep_latest"}
    async with engine_on(tmp_path, llm.base_url, **defaults, **backend) as engine:
        made = await engine.threads.create(OWNER, "made", {})
        await finish(engine, "by-run", "slow", {"steps": 1, "delay": 0.01})
        given = await engine.threads.create(OWNER, "given", {}, ttl=ThreadTTL("delete", 5))
        for thread_id, strategy, minutes in (
            ("made", "keep_latest", 30),
            ("by-run", "keep_latest", 30),
            ("given", "delete", 5),
        ):
            ttl = (await engine.threads.get(OWNER, thread_id)).ttl
            assert ttl is not None and (ttl.strategy, ttl.minutes) == (strategy, minutes)
        assert made.ttl is not None and given.ttl is not None
        copy = await engine.threads.copy(OWNER, "given")
        assert copy.ttl is not None and copy.ttl.minutes == 5


async def test_two_sweepers_on_one_database_never_sweep_a_thread_twice(
    tmp_path: Path,
    llm: ScriptedOpenAIServer,
    backend: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Embedded: two sweepers of one engine; scale-out: two engines (processes) on one database.

    Small batches, so that their claims interleave.
    """
    monkeypatch.setattr(retention_service, "SWEEP_BATCH", 3)
    ids = [f"x{i:02d}" for i in range(30)]
    async with engine_on(tmp_path / "one", llm.base_url, **backend) as one:
        for thread_id in ids:
            await one.threads.create(OWNER, thread_id, {}, ttl=ThreadTTL("delete", 1))
        if backend:
            async with engine_on(tmp_path / "two", llm.base_url, **backend) as two:
                sweepers = [one.retention, two.retention]
                reports = await sweep_together(sweepers)
        else:
            from engine.services import RetentionService

            other = RetentionService(
                one.core, one.threads, one.retention._repository, one.retention.config
            )
            reports = await sweep_together([one.retention, other])
        deleted = [thread_id for report in reports for thread_id in report.deleted]
        assert sorted(deleted) == ids  # each one once
        assert all(report.deleted for report in reports)  # both took part
        assert await one.threads.count(OWNER) == 0


async def sweep_together(sweepers: list[Any]) -> list[Any]:
    """Sweep with each at once, two minutes ahead."""
    at = datetime.now(UTC) + timedelta(minutes=2)
    return list(await asyncio.gather(*(sweeper.sweep(at) for sweeper in sweepers)))


@pytest.mark.parametrize("hours", [168, 0])
async def test_the_sweep_prunes_ended_deliveries_past_webhook_retention_hours(
    tmp_path: Path, llm: ScriptedOpenAIServer, hours: int
) -> None:
    async with engine_on(tmp_path, llm.base_url, webhook_retention_hours=hours) as engine:
        core = engine.core
        outbox = core.storage.deliveries
        # A private address: the engine's own deliverer fails it at its first attempt,
        # without a connection.
        core.events.record(dataclasses.replace(queued("ended"), url="https://10.0.0.1/in"))
        await core.events.flush()
        for _ in range(200):  # at most 10 s
            if (await outbox.for_run("run-ended"))[0]["status"] != "pending":
                break
            await asyncio.sleep(0.05)
        swept = await engine.retention.sweep(datetime.now(UTC) + timedelta(hours=hours - 1))
        assert swept.deliveries == 0  # not that old yet (or kept for ever)
        later = await engine.retention.sweep(datetime.now(UTC) + timedelta(hours=hours + 1))
        assert later.deliveries == (1 if hours else 0)
        assert (await outbox.for_run("run-ended") == []) is bool(hours)


async def test_an_older_sqlite_database_gets_the_ttl_columns_in_place(tmp_path: Path) -> None:
    """A database made before retention (its tables as SCHEMA makes them) upgrades when opened."""
    import sqlite3

    from engine.sqlite import SqliteRunStorage
    from engine.sqlite.database import SCHEMA

    path = str(tmp_path / "atelier.db")
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA)
        conn.execute(
            "INSERT INTO threads (thread_id, owner, created_at, updated_at) VALUES (?, ?, ?, ?)",
            ("old", OWNER, now(), now()),
        )
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(threads)")}
    assert "expires_at" not in columns
    from engine.sqlite.retention import SqliteRetention

    async with SqliteRunStorage(path) as storage:
        old = await storage.threads.get(OWNER, "old")
        assert old is not None and old.ttl is None
        await storage.threads.merge_metadata(OWNER, "old", {}, ThreadTTL("delete", 1))
    async with SqliteRunStorage(path) as storage:  # opened again: nothing to add
        old = await storage.threads.get(OWNER, "old")
        assert old is not None and old.ttl is not None and old.ttl.minutes == 1
        claimed = await SqliteRetention(storage.database).claim_expired(
            "a", datetime.now(UTC) + timedelta(minutes=2), 10, 1
        )
        assert [t.thread_id for t in claimed] == ["old"]
