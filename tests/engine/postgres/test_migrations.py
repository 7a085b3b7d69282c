"""The PostgreSQL schema: versioned migrations, the queue's invariants, the checkpointer.

Every test gets a fresh database on the session's throwaway cluster (tests/support/servers.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph

from engine.postgres.migrations import MIGRATIONS, current_version, latest_version, upgrade
from engine.postgres.pool import AsyncPool, checkpointer, open_pool, ping

ROOT = Path(__file__).resolve().parents[3]

TABLES = {"threads", "runs", "run_events", "knowledge_notes", "assets", "schema_version"}
CHECKPOINT_TABLES = {
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
}


@pytest.fixture
async def pool(postgres_url: str) -> AsyncIterator[AsyncPool]:
    """Yield an open pool on a fresh database."""
    pool = await open_pool(postgres_url, max_size=4)
    yield pool
    await pool.close()


async def _tables(pool: AsyncPool) -> set[str]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ).fetchall()
    return {row["tablename"] for row in rows}


async def _versions(pool: AsyncPool) -> list[int]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT version FROM schema_version ORDER BY version")
        ).fetchall()
    return [row["version"] for row in rows]


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert latest_version() == len(MIGRATIONS)


async def test_upgrade_creates_the_schema_and_is_idempotent(pool: AsyncPool) -> None:
    async with pool.connection() as conn:
        assert await current_version(conn) == 0

    assert await upgrade(pool) == latest_version()
    assert await _tables(pool) >= TABLES | CHECKPOINT_TABLES
    assert await _versions(pool) == [m.version for m in MIGRATIONS]

    assert await upgrade(pool) == latest_version()  # second run: nothing to apply
    assert await _versions(pool) == [m.version for m in MIGRATIONS]
    await ping(pool)


async def test_concurrent_upgrades_apply_each_migration_once(postgres_url: str) -> None:
    pools = [await open_pool(postgres_url, max_size=1) for _ in range(4)]
    try:
        versions = await asyncio.gather(*(upgrade(p) for p in pools))
        assert versions == [latest_version()] * 4
        assert await _versions(pools[0]) == [m.version for m in MIGRATIONS]
    finally:
        for p in pools:
            await p.close()


def test_atelier_db_upgrade_from_two_processes_at_once(postgres_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": postgres_url, "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)
    command = [sys.executable, "-m", "cli.main", "db", "upgrade"]
    procs = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert f"Database schema at version {latest_version()}" in out.decode()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]


def test_atelier_db_upgrade_needs_database_url() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "db", "upgrade"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "DATABASE_URL is not set" in result.stderr


async def _insert_thread(conn: psycopg.AsyncConnection, thread_id: str) -> None:
    await conn.execute("INSERT INTO threads (thread_id, owner) VALUES (%s, 'k')", (thread_id,))


async def _insert_run(
    conn: psycopg.AsyncConnection, run_id: str, thread_id: str, status: str, lease: bool = True
) -> None:
    await conn.execute(
        "INSERT INTO runs (run_id, thread_id, owner, assistant_id, status, kwargs, "
        "multitask_strategy, lease_owner, lease_expires_at) "
        "VALUES (%s, %s, 'k', 'atelier', %s, '{}', 'enqueue', %s, %s)",
        (
            run_id,
            thread_id,
            status,
            "worker-1" if lease else None,
            "infinity" if lease else None,
        ),
    )


async def test_the_database_allows_one_running_run_per_thread(pool: AsyncPool) -> None:
    await upgrade(pool)
    async with pool.connection() as conn:
        await _insert_thread(conn, "t1")
        await _insert_thread(conn, "t2")
        await _insert_run(conn, "r1", "t1", "running")
        await _insert_run(conn, "r2", "t1", "pending")
        await _insert_run(conn, "r3", "t1", "pending")  # many pending: the queue
        await _insert_run(conn, "r4", "t2", "running")  # another thread: fine
        with pytest.raises(psycopg.errors.UniqueViolation):
            await _insert_run(conn, "r5", "t1", "running")
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'r2'")
        await conn.execute(
            "UPDATE runs SET status = 'success', lease_owner = NULL WHERE run_id = 'r1'"
        )
        await conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'r2'")
        # A running run always has a lease holder and an expiry.
        with pytest.raises(psycopg.errors.CheckViolation):
            await _insert_run(conn, "r6", "t2", "running", lease=False)
        with pytest.raises(psycopg.errors.CheckViolation):
            await _insert_run(conn, "r7", "t2", "started")
        # Event ids are unique per run; deleting a thread deletes its runs.
        await conn.execute(
            "INSERT INTO run_events (run_id, seq, event, data) VALUES ('r1', 1, 'end', 'null')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "INSERT INTO run_events (run_id, seq, event, data) VALUES ('r1', 1, 'end', '1')"
            )
        await conn.execute("DELETE FROM threads WHERE thread_id = 't1'")
        row = await (await conn.execute("SELECT count(*) AS n FROM runs")).fetchone()
        assert row is not None and row["n"] == 1


async def test_claim_skips_locked_runs_and_busy_threads(pool: AsyncPool) -> None:
    """The claim query the run engine is meant to use works on this schema's indexes."""
    await upgrade(pool)
    claim = (
        "SELECT run_id FROM runs r WHERE status = 'pending' AND NOT EXISTS "
        "(SELECT 1 FROM runs x WHERE x.thread_id = r.thread_id AND x.status = 'running') "
        "AND NOT EXISTS (SELECT 1 FROM runs y WHERE y.thread_id = r.thread_id "
        "AND y.status = 'pending' AND y.seq < r.seq) "
        "ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    async with pool.connection() as setup:
        for thread in ("busy", "a", "b"):
            await _insert_thread(setup, thread)
        await _insert_run(setup, "busy-running", "busy", "running")
        await _insert_run(setup, "busy-next", "busy", "pending", lease=False)
        await _insert_run(setup, "a-1", "a", "pending", lease=False)
        await _insert_run(setup, "a-2", "a", "pending", lease=False)
        await _insert_run(setup, "b-1", "b", "pending", lease=False)
    async with (
        pool.connection() as first,
        pool.connection() as second,
        first.transaction(),
        second.transaction(),
    ):
        got_first = await (await first.execute(claim)).fetchone()
        got_second = await (await second.execute(claim)).fetchone()
    assert got_first is not None and got_first["run_id"] == "a-1"
    # a-1 is locked by the first claimer and a-2 is not its thread's oldest: b-1.
    assert got_second is not None and got_second["run_id"] == "b-1"


class _Counter(TypedDict):
    count: int
    log: list[str]


def _counter_graph():
    def step(state: _Counter) -> dict[str, object]:
        return {"count": state["count"] + 1, "log": [*state["log"], f"step {state['count']}"]}

    builder = StateGraph(_Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


async def test_the_postgres_checkpointer_round_trips_a_graph(pool: AsyncPool) -> None:
    await upgrade(pool)
    config = {"configurable": {"thread_id": "thread-1"}}
    graph = _counter_graph().compile(checkpointer=checkpointer(pool))
    first = await graph.ainvoke({"count": 0, "log": []}, config)
    assert first == {"count": 1, "log": ["step 0"]}

    # A second saver over another pool (another replica) sees the same state and history.
    other = await open_pool(pool.conninfo, max_size=2)
    try:
        resumed = _counter_graph().compile(checkpointer=checkpointer(other))
        state = await resumed.aget_state(config)
        assert state.values == first
        second = await resumed.ainvoke(
            {"count": state.values["count"], "log": state.values["log"]}, config
        )
        assert second == {"count": 2, "log": ["step 0", "step 1"]}
        history = [s async for s in resumed.aget_state_history(config)]
        assert len(history) >= 4  # input + step, twice
        assert (await graph.aget_state(config)).values == second
    finally:
        await other.close()
