"""The embedded deployment's Store: LangGraph's `AsyncSqliteStore` in `DATA_DIR/store.db`.

Its own file, not `atelier.db`: LangGraph's store opens its transactions with a
deferred `BEGIN` and reads before it writes, which the writers of `atelier.db` must
not do (engine/sqlite/database.py: a read that upgrades to a write fails at once
while another connection writes), and a file of its own never makes a run's frames
wait for a store write. It keeps its own lock (one operation at a time on its
connection), WAL and a busy timeout like the run store's. Scoping per API key and
the search ranking are `engine.store.ScopedStore`'s; a ranked search reads its
candidates in the ranking process, on a connection of its own
(`SqliteStoreReader`), so decoding them never holds the event loop.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from langgraph.store.base import Item
from langgraph.store.sqlite import SqliteStore
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


class SqliteStoreReader:
    """Reads the store off the event loop (an `engine.ranking.StoreReader`).

    Each thread that reads (the ranking process's) gets a connection of its own to
    the store's file (kept: its page cache stays warm) and LangGraph's synchronous
    `SqliteStore` over it. Reads only; renewing TTLs is one `BEGIN IMMEDIATE`
    transaction (a deferred one that reads first could not wait its turn,
    engine/sqlite/database.py).
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """Read the store in the file at `path`."""
        self._path = str(path)
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Send the file's path and the timeout alone (the ranking process connects itself)."""
        return {"path": self._path, "busy_timeout": self._busy_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], busy_timeout=state["busy_timeout"])  # type: ignore[misc]

    def _store(self) -> SqliteStore:
        store: SqliteStore | None = getattr(self._local, "store", None)
        if store is None:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,  # closed by `close`, from the loop's thread
            )
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout * 1000)}")
            store = SqliteStore(conn, ttl=STORE_TTL)
            store.is_setup = True  # the async store set the tables up
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
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "UPDATE store SET expires_at = DATETIME(CURRENT_TIMESTAMP, '+' || ttl_minutes "
                "|| ' minutes') WHERE prefix = ? AND key = ? AND ttl_minutes IS NOT NULL",
                keys,
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close every connection opened in this process (its readers are idle by then)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
