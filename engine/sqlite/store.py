"""The embedded deployment's Store: LangGraph's `AsyncSqliteStore` in `DATA_DIR/store.db`.

Its own file, not `atelier.db`: LangGraph's store opens its transactions with a
deferred `BEGIN` and reads before it writes, which the writers of `atelier.db` must
not do (engine/sqlite/database.py: a read that upgrades to a write fails at once
while another connection writes), and a file of its own never makes a run's frames
wait for a store write. It keeps its own lock (one operation at a time on its
connection), WAL and a busy timeout like the run store's. Scoping per API key and
the search ranking are `engine.store.ScopedStore`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from langgraph.store.sqlite.aio import AsyncSqliteStore

from engine.sqlite import BUSY_TIMEOUT
from engine.store import STORE_TTL

#: The store's file in DATA_DIR.
STORE_FILE = "store.db"


@contextlib.asynccontextmanager
async def open_sqlite_store(
    path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT
) -> AsyncIterator[AsyncSqliteStore]:
    """Open the store at `path` for the block: set up its tables, sweep expired items."""
    async with AsyncSqliteStore.from_conn_string(str(path), ttl=STORE_TTL) as store:
        await store.conn.execute("PRAGMA journal_mode=WAL")
        await store.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        await store.setup()
        await store.start_ttl_sweeper()
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
