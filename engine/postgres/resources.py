"""Open the scale-out backend's shared resources for one process's lifetime.

`open_backend(settings)` is what the engine's opener enters (in every process) when
`DATABASE_URL` is set: it opens the pools (an async one, and a small one for blocking
callers, which the product's asset store uses), brings the schema up to date
(`upgrade`, safe when replicas start together) and builds LangGraph's checkpointer,
plus the Redis client when `REDIS_URL` is set, and the readiness checks of both servers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import PoolTimeout
from redis.asyncio import Redis

from core.settings import Settings
from engine.errors import NotReadyError
from engine.postgres import redis_pubsub as redis_signals
from engine.postgres.migrations import upgrade
from engine.postgres.pool import AsyncPool, SyncPool, checkpointer, open_pool, open_sync_pool, ping

#: Connections of a process's async pool: its runs' checkpoints and frames, the product's
#: notes and its HTTP reads share them; a caller waits (up to CHECKOUT_TIMEOUT) when all
#: are busy.
POOL_SIZE = 10
#: Connections of the pool for blocking callers (worker threads serving or storing images).
ASSET_POOL_SIZE = 4


@dataclass
class PostgresBackend:
    """The scale-out backend's resources of one process (see the module docstring)."""

    pool: AsyncPool
    asset_pool: SyncPool
    schema_version: int
    checkpointer: AsyncPostgresSaver
    redis: Redis | None = None
    #: Readiness checks by name ("postgres", "redis"): each raises when its server fails.
    ready_checks: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)


async def postgres_ready(pool: AsyncPool) -> None:
    """Readiness: PostgreSQL answers a query (`NotReadyError` saying so when it does not)."""
    try:
        await ping(pool)
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise NotReadyError(
            "PostgreSQL (DATABASE_URL) is unreachable; requests that need it answer 503 "
            "and runs wait until it is back"
        ) from exc


@contextlib.asynccontextmanager
async def open_backend(settings: Settings) -> AsyncIterator[PostgresBackend]:
    """Open pools, upgrade the schema and build the backend; close everything on exit.

    Raises:
        ValueError: `DATABASE_URL` is not set.
        psycopg_pool.PoolTimeout: PostgreSQL cannot be reached.
    """
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set: the embedded mode needs no backend")
    url = settings.database_url.get_secret_value()
    async with contextlib.AsyncExitStack() as stack:
        pool = await open_pool(url, max_size=POOL_SIZE)
        stack.push_async_callback(pool.close)
        version = await upgrade(pool)
        asset_pool = await asyncio.to_thread(open_sync_pool, url, max_size=ASSET_POOL_SIZE)
        stack.push_async_callback(asyncio.to_thread, asset_pool.close)  # joins its threads

        backend = PostgresBackend(
            pool=pool,
            asset_pool=asset_pool,
            schema_version=version,
            checkpointer=checkpointer(pool),
        )
        backend.ready_checks["postgres"] = lambda: postgres_ready(pool)
        if settings.redis_url is not None:
            client = redis_signals.create_client(settings.redis_url.get_secret_value())
            stack.push_async_callback(client.aclose)
            backend.redis = client
            backend.ready_checks["redis"] = lambda: redis_signals.ping(client)
        yield backend
