"""`app.db.pool`: a session stopped inside a transaction does not keep its locks."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from app.db import pool as pools


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
