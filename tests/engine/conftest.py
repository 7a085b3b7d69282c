"""Run storage for the tests here, over each backend: SQLite always, PostgreSQL when it can.

The PostgreSQL and Redis servers are the throwaway ones of tests/support/servers.py,
started on first use; without the binaries (or the `scale` extra) the tests that need
them skip, except under `CI=true`, where they fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.records import Frame
from tests.support.servers import (
    migrated_postgres_url,
    postgres_cluster,
    postgres_url,
    redis_server,
)

__all__ = ["migrated_postgres_url", "postgres_cluster", "postgres_url", "redis_server"]


@dataclass
class Opened:
    """A storage under test and the frames it published, as (run id, frame id)."""

    storage: Any
    #: The database: a SQLite file's path or a PostgreSQL URL.
    where: str
    published: list[tuple[str, int]] = field(default_factory=list)

    def publish(self, run_id: str, frames: list[Frame]) -> None:
        self.published.extend((run_id, f.id) for f in frames)

    async def frame_ids_elsewhere(self, run_id: str) -> list[int]:
        """Return a run's committed frame ids, read on a connection of its own."""
        if self.where.startswith("postgresql://"):
            import psycopg

            async with await psycopg.AsyncConnection.connect(self.where) as conn:
                cursor = await conn.execute(
                    "SELECT seq FROM run_events WHERE run_id = %s ORDER BY seq", (run_id,)
                )
                return [row[0] for row in await cursor.fetchall()]
        import aiosqlite

        async with aiosqlite.connect(self.where) as conn:
            cursor = await conn.execute(
                "SELECT id FROM run_events WHERE run_id = ? ORDER BY id", (run_id,)
            )
            return [row[0] for row in await cursor.fetchall()]


@pytest.fixture(params=["sqlite", "postgres"])
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opened]:
    """Yield an open run storage of each backend on a fresh database."""
    if request.param == "sqlite":
        from engine.sqlite import SqliteRunStorage

        path = str(tmp_path / "atelier.db")
        opened = Opened(None, path)
        async with SqliteRunStorage(path, opened.publish) as storage:
            opened.storage = storage
            yield opened
        return
    url = request.getfixturevalue("migrated_postgres_url")
    from engine.postgres import PostgresRunStorage
    from engine.postgres.pool import open_pool

    pool = await open_pool(url, max_size=4)
    try:
        opened = Opened(None, url)
        async with PostgresRunStorage(pool, opened.publish) as storage:
            opened.storage = storage
            yield opened
    finally:
        await pool.close()
