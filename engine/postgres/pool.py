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
- a connection check (`AsyncConnectionPool.check_connection`, a round trip) before a
  connection that sat idle in the pool for `CHECK_IDLE_AFTER` seconds or more is handed
  out, so one the server closed while it was idle (a restart, an idle timeout) is
  replaced instead of failing the caller's first query. A connection back from use
  more recently goes out unchecked: a worker checks out a connection for every
  statement it sends, and checking each cost it a round trip per statement (3 % of
  its CPU at 150 runs). One that broke in use is discarded when it comes back. Writes
  that meet a connection lost since are retried (the event log, the checkpointer); an
  HTTP request that meets one answers 503 with `Retry-After`.
- no pipeline mode: LangGraph refuses a pipeline over a pool, and a shared connection in
  pipeline mode would interleave callers.

The synchronous pool serves the asset store (`providers.pg_assets`), whose interface is
synchronous (called in worker threads, like the file store it replaces).

When PostgreSQL goes away (a restart, a failover, a network cut), both pools:

- reconnect within a couple of seconds once it is back: psycopg_pool doubles the delay
  between reconnection attempts without bound (1, 2, 4, 8, 16 s...), so after a
  30-second outage a pool could stay without connections for another 30 s; here a
  series of attempts lasts `RECONNECT_WINDOW` and a new one starts at once when it
  gives up (`reconnect_failed`), so attempts never lie more than about 2 s apart.
- know it is away (`Reachability`: the last attempt to open a connection failed), and
  make an HTTP request (`engine.request_scope`) give up waiting for a connection within about
  `UNREACHABLE_CHECKOUT_TIMEOUT` then instead of `CHECKOUT_TIMEOUT`, so it fails fast
  with `PoolTimeout` (rendered 503 by `app.errors`) rather than hanging. A request
  waits `REQUEST_CHECKOUT_TIMEOUT` at most in any case (a pool busy to its last
  connection). Work outside requests (a worker's
  claims, event writes, checkpoints) keeps waiting up to `CHECKOUT_TIMEOUT`, so a run
  rides out a short outage where it stands.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Self

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from engine.request_scope import in_request

log = logging.getLogger(__name__)

#: Seconds `open_pool` waits for the first connections (the database may still be starting).
OPEN_TIMEOUT = 30.0
#: Seconds a caller waits for a free connection before `PoolTimeout`.
CHECKOUT_TIMEOUT = 30.0
#: Seconds an HTTP request (`request_scope`) waits for a free connection at most.
REQUEST_CHECKOUT_TIMEOUT = 5.0
#: Seconds an HTTP request waits for a connection while PostgreSQL is known unreachable.
UNREACHABLE_CHECKOUT_TIMEOUT = 1.0
#: Seconds one series of reconnection attempts lasts before a new one starts (see above).
RECONNECT_WINDOW = 4.0
#: Seconds PostgreSQL lets one of our sessions sit idle inside a transaction before it
#: ends the session. A process stopped there (SIGSTOP, a VM paused, a client cut off
#: mid-commit) would otherwise keep its row locks, a run's row among them, for as long
#: as it is stopped; the lease sweep skips locked rows (`SKIP LOCKED`), so that run
#: would never be handed to another worker. Our transactions are a few statements
#: sent back to back, never idle for seconds.
IDLE_IN_TRANSACTION_TIMEOUT = 10.0
#: Seconds a connection sits idle in the pool before it is checked on its way out.
CHECK_IDLE_AFTER = 1.0
#: Seconds `ping` waits for a connection (under the readiness check's own timeout).
PING_TIMEOUT = 1.5


class Reachability:
    """Whether a pool's last attempt to open a connection failed (the server is away)."""

    def __init__(self, name: str) -> None:
        """Track the pool called `name` (for the log)."""
        self.name = name
        self.down_since: float | None = None

    @property
    def down(self) -> bool:
        """Whether the last connection attempt failed."""
        return self.down_since is not None

    def failed(self, error: BaseException) -> None:
        """Note a failed connection attempt."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("PostgreSQL is unreachable (pool %r): %s", self.name, error)

    def succeeded(self) -> None:
        """Note a connection opened."""
        if self.down_since is not None:
            away = time.monotonic() - self.down_since
            self.down_since = None
            log.warning("PostgreSQL is reachable again (pool %r, after %.1f s)", self.name, away)


def _async_connection_class(reachability: Reachability) -> type[AsyncConnection[DictRow]]:
    """Return a connection class that reports its connection attempts to `reachability`."""

    class TrackedAsyncConnection(AsyncConnection[DictRow]):
        #: `time.monotonic()` when the pool last took the connection back (0: never).
        returned_at = 0.0

        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = await super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as exc:
                reachability.failed(exc)
                raise
            reachability.succeeded()
            return conn

    return TrackedAsyncConnection


def _sync_connection_class(reachability: Reachability) -> type[Connection[DictRow]]:
    """Return a connection class that reports its connection attempts to `reachability`."""

    class TrackedConnection(Connection[DictRow]):
        returned_at = 0.0  # as `TrackedAsyncConnection.returned_at`

        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as exc:
                reachability.failed(exc)
                raise
            reachability.succeeded()
            return conn

    return TrackedConnection


class AsyncPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """The async pool: fails fast inside a request while the server is away (see above)."""

    reachability: Reachability

    async def getconn(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg_pool's own signature)
    ) -> AsyncConnection[DictRow]:
        """Return a connection; an HTTP request fails fast while the server is away.

        A request waits in slices of `UNREACHABLE_CHECKOUT_TIMEOUT`, giving up after
        the first slice that ends with the server unreachable (one that started before
        the pool noticed included), and after `REQUEST_CHECKOUT_TIMEOUT` in any case.
        """
        if timeout is not None or not in_request():
            return await super().getconn(timeout)
        deadline = time.monotonic() + min(self.timeout, REQUEST_CHECKOUT_TIMEOUT)
        while True:
            left = deadline - time.monotonic()
            try:
                return await super().getconn(max(0.01, min(left, UNREACHABLE_CHECKOUT_TIMEOUT)))
            except PoolTimeout:
                if self.reachability.down or time.monotonic() >= deadline:
                    raise


class SyncPool(ConnectionPool[Connection[DictRow]]):
    """The synchronous pool, failing fast like `AsyncPool`."""

    reachability: Reachability

    def getconn(self, timeout: float | None = None) -> Connection[DictRow]:
        """Return a connection; an HTTP request fails fast (see `AsyncPool.getconn`)."""
        if timeout is not None or not in_request():
            return super().getconn(timeout)
        deadline = time.monotonic() + min(self.timeout, REQUEST_CHECKOUT_TIMEOUT)
        while True:
            left = deadline - time.monotonic()
            try:
                return super().getconn(max(0.01, min(left, UNREACHABLE_CHECKOUT_TIMEOUT)))
            except PoolTimeout:
                if self.reachability.down or time.monotonic() >= deadline:
                    raise


async def _reconnect_again(pool: AsyncConnectionPool[Any]) -> None:
    """Start a new series of reconnection attempts at once (see `RECONNECT_WINDOW`)."""
    with contextlib.suppress(Exception):  # closing: nothing to reconnect
        await pool.check()


def _reconnect_again_sync(pool: ConnectionPool[Any]) -> None:
    """Start a new series of reconnection attempts at once (see `RECONNECT_WINDOW`)."""
    with contextlib.suppress(Exception):
        pool.check()


def connection_kwargs(application_name: str = "atelier") -> dict[str, Any]:
    """Return the keyword arguments every pooled connection is opened with."""
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "application_name": application_name,
    }


_SET_IDLE_TIMEOUT = "SELECT set_config('idle_in_transaction_session_timeout', %s, false)"


def _idle_timeout() -> tuple[str]:
    return (f"{int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)}ms",)


async def _returned(conn: AsyncConnection[Any]) -> None:
    """Note when a connection came back to the pool (the pool's `reset` callback)."""
    conn.returned_at = time.monotonic()  # type: ignore[attr-defined]


def _returned_sync(conn: Connection[Any]) -> None:
    """Note when a connection came back to the pool (the pool's `reset` callback)."""
    conn.returned_at = time.monotonic()  # type: ignore[attr-defined]


async def _check(conn: AsyncConnection[Any]) -> None:
    """Check a connection idle for `CHECK_IDLE_AFTER` seconds with a round trip."""
    if time.monotonic() - getattr(conn, "returned_at", 0.0) >= CHECK_IDLE_AFTER:
        await AsyncConnectionPool.check_connection(conn)


def _check_sync(conn: Connection[Any]) -> None:
    """Check a connection idle for `CHECK_IDLE_AFTER` seconds with a round trip."""
    if time.monotonic() - getattr(conn, "returned_at", 0.0) >= CHECK_IDLE_AFTER:
        ConnectionPool.check_connection(conn)


async def _configure(conn: AsyncConnection[Any]) -> None:
    """Set up a new pooled connection (see `IDLE_IN_TRANSACTION_TIMEOUT`)."""
    await conn.execute(_SET_IDLE_TIMEOUT, _idle_timeout())


def _configure_sync(conn: Connection[Any]) -> None:
    """Set up a new pooled connection (see `IDLE_IN_TRANSACTION_TIMEOUT`)."""
    conn.execute(_SET_IDLE_TIMEOUT, _idle_timeout())


def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, name: str = "atelier"
) -> AsyncPool:
    """Return a closed async pool for `url`; open it with `await pool.open(wait=True)`.

    Created closed (psycopg deprecates opening in the constructor) so that it is opened
    inside the application's lifespan, on its event loop, never at import.
    """
    reachability = Reachability(name)
    pool = AsyncPool(
        url,
        min_size=min_size,
        max_size=max_size,
        name=name,
        timeout=CHECKOUT_TIMEOUT,
        kwargs=connection_kwargs(name),
        connection_class=_async_connection_class(reachability),
        configure=_configure,
        check=_check,
        reset=_returned,
        reconnect_timeout=RECONNECT_WINDOW,
        reconnect_failed=_reconnect_again,
        open=False,
    )
    pool.reachability = reachability
    return pool


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
    reachability = Reachability(name)
    pool = SyncPool(
        url,
        min_size=1,
        max_size=max_size,
        name=name,
        timeout=CHECKOUT_TIMEOUT,
        kwargs=connection_kwargs(name),
        connection_class=_sync_connection_class(reachability),
        configure=_configure_sync,
        check=_check_sync,
        reset=_returned_sync,
        reconnect_timeout=RECONNECT_WINDOW,
        reconnect_failed=_reconnect_again_sync,
        open=False,
    )
    pool.reachability = reachability
    try:
        pool.open(wait=True, timeout=OPEN_TIMEOUT)
    except BaseException:
        pool.close()
        raise
    return pool


def checkpointer(pool: AsyncPool) -> AsyncPostgresSaver:
    """Return LangGraph's Postgres checkpointer over the pool.

    Its tables are created by `engine.postgres.migrations.upgrade` (which calls `setup()` under
    the migration lock), never here: a replica that starts must not race another one's
    `CREATE INDEX CONCURRENTLY`.
    """
    return AsyncPostgresSaver(conn=pool)


async def ping(pool: AsyncPool) -> None:
    """Run a trivial query on a pooled connection (readiness); raise when it fails.

    Raises:
        psycopg_pool.PoolTimeout: No connection within `PING_TIMEOUT` seconds.
        psycopg.OperationalError: The query failed (the server went away).
    """
    async with pool.connection(timeout=PING_TIMEOUT) as conn:
        await conn.execute("SELECT 1")
