"""`engine.postgres.pool`: a session stopped inside a transaction does not keep its locks."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from engine.postgres import pool as pools


async def test_a_session_idle_inside_a_transaction_is_ended_and_its_row_locks_released(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker stopped mid-commit (SIGSTOP) held its run's row lock, and the lease
    # sweep, which skips locked rows, never handed the run to another worker.
    monkeypatch.setattr(pools, "IDLE_IN_TRANSACTION_TIMEOUT", 0.5)
    pool = await pools.open_pool(postgres_url, max_size=2)
    try:
        async with pool.connection() as setup:
            await setup.execute("CREATE TABLE IF NOT EXISTS lock_probe (id int PRIMARY KEY)")
            await setup.execute("INSERT INTO lock_probe VALUES (1) ON CONFLICT DO NOTHING")
        stalled = await pool.getconn()
        try:
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                async with stalled.transaction():
                    await stalled.execute("SELECT id FROM lock_probe WHERE id = 1 FOR UPDATE")
                    await asyncio.sleep(1.5)  # "stopped": no statement, no commit
        finally:
            await pool.putconn(stalled)
        async with pool.connection() as other:  # the row is free again
            rows = await (
                await other.execute("SELECT id FROM lock_probe WHERE id = 1 FOR UPDATE SKIP LOCKED")
            ).fetchall()
            assert [row["id"] for row in rows] == [1]
            await other.execute("DROP TABLE lock_probe")
    finally:
        await pool.close()


async def test_a_connection_idle_in_the_pool_is_checked_and_one_back_from_use_is_not(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pools, "CHECK_IDLE_AFTER", 0.5)
    pool = await pools.open_pool(postgres_url, min_size=1, max_size=1, name="checked")
    try:

        async def terminate() -> None:
            async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as c:
                await c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'checked'"
                )

        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
        await terminate()
        with pytest.raises(psycopg.OperationalError):  # just used: handed out unchecked
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        async with pool.connection() as conn:  # the pool replaced the broken one
            await conn.execute("SELECT 1")
        await asyncio.sleep(0.6)
        await terminate()
        async with pool.connection() as conn:  # idle long enough: checked, replaced
            assert await (await conn.execute("SELECT 1 AS one")).fetchone() == {"one": 1}
    finally:
        await pool.close()
