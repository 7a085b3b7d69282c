"""The scale-out deployment's Store: LangGraph's `AsyncPostgresStore` in the service's database.

Its tables are created and upgraded by `store_setup`, run by the schema upgrade
(`engine.postgres.migrations.upgrade`) under the migration lock, as the checkpointer's are:
replicas and workers starting together never race LangGraph's own migrations.
Every process keeps one store over its async pool, and sweeps expired items (a
`DELETE` of what has expired: harmless when several processes do it). Scoping per
API key and the search ranking are `engine.store.ScopedStore`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from engine.store import STORE_TTL


async def store_setup(conn: AsyncConnection[Any]) -> None:
    """Create or upgrade LangGraph's store tables on this (locked) connection."""
    await AsyncPostgresStore(conn).setup()


@contextlib.asynccontextmanager
async def open_postgres_store(
    pool: AsyncConnectionPool[Any],
) -> AsyncIterator[AsyncPostgresStore]:
    """Open the store over `pool` (a migrated database) for the block; sweep expired items."""
    store = AsyncPostgresStore(pool, ttl=STORE_TTL)
    await store.start_ttl_sweeper()
    try:
        yield store
    finally:
        await store.stop_ttl_sweeper()
