"""The scale-out deployment's Store: LangGraph's `AsyncPostgresStore` in the service's database.

Its tables are created and upgraded by `store_setup`, run by the schema upgrade
(`engine.postgres.migrations.upgrade`) under the migration lock, as the checkpointer's are:
replicas and workers starting together never race LangGraph's own migrations.
Every process keeps one store over its async pool, and sweeps expired items (a
`DELETE` of what has expired: harmless when several processes do it). Scoping per
API key and the search ranking are `engine.store.ScopedStore`'s; a ranked search
reads its candidates in the ranking process, through LangGraph's synchronous
`PostgresStore` on a connection of its own (`PostgresStoreReader`), so decoding
them never holds the event loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from langgraph.store.base import Item
from langgraph.store.postgres import PostgresStore
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
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


class PostgresStoreReader:
    """Reads the store off the event loop (an `engine.ranking.StoreReader`).

    Each thread that reads (the ranking process's) opens a connection of its own to
    `url`, kept, with LangGraph's synchronous `PostgresStore` over it.
    """

    def __init__(self, url: str) -> None:
        """Read the store of the database at `url`."""
        self._url = url
        self._local = threading.local()
        self._opened: list[psycopg.Connection[DictRow]] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Send the URL alone (the ranking process connects itself)."""
        return {"url": self._url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"])  # type: ignore[misc]

    def _store(self) -> PostgresStore:
        store: PostgresStore | None = getattr(self._local, "store", None)
        if store is None or store.conn.closed:
            conn = psycopg.connect(
                self._url,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                application_name="atelier-ranking",
            )
            store = PostgresStore(conn, ttl=STORE_TTL)
            self._local.store = store
            with self._lock:
                self._opened.append(conn)
        return store

    def search(
        self, prefix: tuple[str, ...], filter: dict[str, Any] | None, limit: int
    ) -> list[Item]:
        """Return up to `limit` items under `prefix` matching `filter`, newest first."""
        return list(self._store().search(prefix, filter=filter, limit=limit, refresh_ttl=False))

    def refresh(self, keys: Sequence[tuple[str, str]]) -> None:
        """Renew the TTL of the items named (prefix text, key) that have one."""
        if not keys:
            return
        conn = self._store().conn
        assert isinstance(conn, psycopg.Connection)
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "UPDATE store SET expires_at = now() + (ttl_minutes || ' minutes')::interval "
                "WHERE prefix = %s AND key = %s AND ttl_minutes IS NOT NULL",
                keys,
            )

    def close(self) -> None:
        """Close every connection opened in this process."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
