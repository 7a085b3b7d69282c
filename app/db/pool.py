"""Connection pools for PostgreSQL, and LangGraph's checkpointer over them.

Every connection of the async pool is set up the way `AsyncPostgresSaver` needs and the
rest of Atelier assumes:

- `autocommit=True`: a statement outside `conn.transaction()` commits at once, so no
  connection goes back to the pool inside an open transaction; multi-statement writes
  use `async with conn.transaction():` explicitly.
- `prepare_threshold=0`: every statement is prepared on its first run (psycopg's
  setting; LangGraph's own `from_conn_string` uses the same). A statement of several
  commands cannot be prepared: run those with `execute(sql, prepare=False)`.
- `row_factory=dict_row`: rows are dicts (the checkpointer asks for them anyway).
- a connection check (`AsyncConnectionPool.check_connection`) before a connection is
  handed out, so one the server closed (restart, idle timeout) is replaced instead of
  failing the caller's first query.
- no pipeline mode: LangGraph refuses a pipeline over a pool, and a shared connection in
  pipeline mode would interleave callers.

The synchronous pool serves the asset store (`providers.pg_assets`), whose interface is
synchronous (called in worker threads, like the file store it replaces).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

#: Seconds `open_pool` waits for the first connections (the database may still be starting).
OPEN_TIMEOUT = 30.0
#: Seconds a caller waits for a free connection before `PoolTimeout`.
CHECKOUT_TIMEOUT = 30.0

AsyncPool = AsyncConnectionPool[AsyncConnection[DictRow]]
SyncPool = ConnectionPool[Connection[DictRow]]


def connection_kwargs(application_name: str = "atelier") -> dict[str, Any]:
    """Return the keyword arguments every pooled connection is opened with."""
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "application_name": application_name,
    }


def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, name: str = "atelier"
) -> AsyncPool:
    """Return a closed async pool for `url`; open it with `await pool.open(wait=True)`.

    Created closed (psycopg deprecates opening in the constructor) so that it is opened
    inside the application's lifespan, on its event loop, never at import.
    """
    return AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        name=name,
        timeout=CHECKOUT_TIMEOUT,
        kwargs=connection_kwargs(name),
        connection_class=AsyncConnection[DictRow],
        check=AsyncConnectionPool.check_connection,
        open=False,
    )


async def open_pool(url: str, **options: Any) -> AsyncPool:
    """Create an async pool (see `create_pool`), open it and wait for its first connection.

    Raises:
        psycopg_pool.PoolTimeout: No connection within `OPEN_TIMEOUT` seconds.
    """
    pool = create_pool(url, **options)
    try:
        await pool.open(wait=True, timeout=OPEN_TIMEOUT)
    except BaseException:
        await pool.close()
        raise
    return pool


def open_sync_pool(url: str, *, max_size: int = 4, name: str = "atelier-assets") -> SyncPool:
    """Return an open synchronous pool (for code that runs in worker threads)."""
    pool: SyncPool = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        name=name,
        timeout=CHECKOUT_TIMEOUT,
        kwargs=connection_kwargs(name),
        connection_class=Connection[DictRow],
        check=ConnectionPool.check_connection,
        open=False,
    )
    try:
        pool.open(wait=True, timeout=OPEN_TIMEOUT)
    except BaseException:
        pool.close()
        raise
    return pool


def checkpointer(pool: AsyncPool) -> AsyncPostgresSaver:
    """Return LangGraph's Postgres checkpointer over the pool.

    Its tables are created by `app.db.migrations.upgrade` (which calls `setup()` under
    the migration lock), never here: a replica that starts must not race another one's
    `CREATE INDEX CONCURRENTLY`.
    """
    return AsyncPostgresSaver(conn=pool)


async def ping(pool: AsyncPool) -> None:
    """Run a trivial query on a pooled connection (readiness); raise when it fails."""
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")
