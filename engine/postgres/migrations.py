"""The PostgreSQL schema, as numbered migrations applied in order.

`upgrade` brings a database to the newest version: `atelier db upgrade` runs it, and so
does the service at start. It is safe to run from many processes at once (replicas and
workers starting together): everything happens under one session-level advisory lock,
each migration runs in its own transaction together with the insert of its row in
`schema_version`, so a migration is applied exactly once, wholly or not at all. After
the migrations, LangGraph's `AsyncPostgresSaver.setup()` creates or upgrades the
checkpoint tables (it keeps its own `checkpoint_migrations` table), under the same lock
because its migrations are not safe to race (`CREATE INDEX CONCURRENTLY`), and then
`AsyncPostgresStore.setup()` the Store's (`engine.postgres.store`, its own
`store_migrations` table).

Each version's SQL is a text of `engine.postgres.schema_runs` (1–7) or
`engine.postgres.schema_teams` (8–12); a new one goes in the last such module (or a new
one beside it when that grows past the size cap). Rules for a new migration: append it
to `MIGRATIONS`, never edit or reorder a released one, and keep it
backward compatible with the previous release's code while replicas roll over (add
columns with defaults; drop only what the previous release no longer reads). Queries
name their columns, never `SELECT *`: pooled connections prepare statements
(`prepare_threshold=0`), and a prepared `SELECT *` fails ("cached plan must not change
result type") once a migration adds a column under a running replica.

A database whose version is newer than this code knows is left alone (logged): an old
replica keeps serving during a rolling upgrade.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from engine.postgres.pool import AsyncPool, open_pool
from engine.postgres.schema_runs import V1, V2, V3, V4, V5, V6, V7
from engine.postgres.schema_teams import V8, V9, V10, V11, V12
from engine.postgres.store import store_setup

log = logging.getLogger(__name__)

#: Key of the advisory lock migrations run under ("ATLR" in ASCII).
MIGRATION_LOCK = 0x41544C52
#: Seconds between two tries for the migration lock, and before giving up on it.
LOCK_POLL = 0.2
LOCK_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: its version (1, 2, …), a short name and its SQL."""

    version: int
    name: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "threads, runs, events, notes, assets", V1),
    Migration(2, "lease renewals update runs in place", V2),
    Migration(3, "webhook outbox", V3),
    Migration(4, "crons", V4),
    Migration(5, "run feedback", V5),
    Migration(6, "knowledge notes in namespaces, owned by keys", V6),
    Migration(7, "assistants and their versions", V7),
    Migration(8, "managed API keys and the audit trail", V8),
    Migration(9, "quotas and usage per key", V9),
    Migration(10, "thread TTLs and retention sweeps", V10),
    Migration(11, "datasets, experiments and online evaluation", V11),
    Migration(12, "campaigns and their publications", V12),
)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def latest_version() -> int:
    """Return the version the newest migration brings a database to."""
    return MIGRATIONS[-1].version if MIGRATIONS else 0


async def current_version(conn: AsyncConnection[DictRow]) -> int:
    """Return the schema version of the database (0: never migrated)."""
    exists = await (await conn.execute("SELECT to_regclass('schema_version') AS t")).fetchone()
    if exists is None or exists["t"] is None:
        return 0
    row = await (
        await conn.execute("SELECT coalesce(max(version), 0) AS v FROM schema_version")
    ).fetchone()
    return int(row["v"]) if row is not None else 0


async def upgrade(pool: AsyncPool) -> int:
    """Apply the migrations the database lacks and set up the checkpoint tables.

    Returns:
        The schema version the database is at afterwards.
    """
    async with pool.connection() as conn:
        await _lock(conn)
        try:
            await conn.execute(_VERSION_TABLE)
            version = await current_version(conn)
            if version > latest_version():
                log.warning(
                    "database schema is at version %d, newer than this release's %d; "
                    "leaving it as it is",
                    version,
                    latest_version(),
                )
            for migration in [m for m in MIGRATIONS if m.version > version]:
                async with conn.transaction():
                    await conn.execute(migration.sql, prepare=False)
                    await conn.execute(
                        "INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                log.info("applied schema migration %d (%s)", migration.version, migration.name)
                version = migration.version
            await checkpointer_setup(conn)
            await store_setup(conn)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return version


async def _lock(conn: AsyncConnection[DictRow]) -> None:
    """Take the migration lock, polling for it rather than waiting in a statement.

    Session-level, so it is held across the migrations' transactions; released by
    `upgrade` (or by the server if the connection dies). Not `pg_advisory_lock`: a
    process blocked in that statement is an open transaction, and the holder's
    `CREATE INDEX CONCURRENTLY` (the checkpointer's setup) waits for every open
    transaction to end — a deadlock between two replicas starting together.
    """
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        row = await (
            await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (MIGRATION_LOCK,))
        ).fetchone()
        if row is not None and row["got"]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"another process held the migration lock for {LOCK_TIMEOUT:.0f} s")
        await asyncio.sleep(LOCK_POLL)


async def upgrade_url(url: str) -> int:
    """Upgrade the database at `url` over a one-connection pool (`atelier db upgrade`)."""
    pool = await open_pool(url, min_size=1, max_size=1, name="atelier-migrate")
    try:
        return await upgrade(pool)
    finally:
        await pool.close()


async def checkpointer_setup(conn: AsyncConnection[DictRow]) -> None:
    """Create or upgrade LangGraph's checkpoint tables on this (locked) connection."""
    await AsyncPostgresSaver(conn=conn).setup()
