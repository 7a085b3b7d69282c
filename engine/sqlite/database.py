"""The run engine's SQLite database: connections, write transactions and the schema.

Everything lives in `DATA_DIR/atelier.db` (WAL mode), next to the knowledge notes
and LangGraph's checkpoints (`AsyncSqliteSaver` on the same file), so one file
holds a deployment's state.

Connections: one *writer* connection, used only for writes, in explicit
`BEGIN IMMEDIATE … COMMIT` transactions under one lock, and one *reader*
connection (`query_only`) for every read. Keeping reads off the writer is what
makes the busy timeout work: SQLite calls the busy handler only when a
connection starts a write with no read transaction open. A connection that
still has a read statement in flight (a half-iterated cursor, or an `execute`
whose `fetch` has not run yet) and then runs `BEGIN IMMEDIATE` gets
`database is locked` *at once* while any other connection holds the write lock
(the checkpointer commits a checkpoint every step), and at once too when its
read snapshot is older than the last commit (`SQLITE_BUSY_SNAPSHOT`). With one
shared connection that happened under load to about one run in six; with the
split the writer never holds a read, so it waits its turn (busy timeout) like
every other writer of the file, and readers never see an uncommitted frame.
The other writers of `atelier.db` (LangGraph's `AsyncSqliteSaver`, the notes
repository) follow the same rule: a busy timeout, and a write transaction that
starts with a write, never a read that upgrades.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import aiosqlite

#: Seconds a connection waits for another connection's write lock (SQLite busy timeout).
BUSY_TIMEOUT = 5.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id   TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL DEFAULT 'idle',
    state       TEXT,                       -- values after the last run, JSON
    interrupts  TEXT NOT NULL DEFAULT '{}'  -- pending interrupts by task id, JSON
);
CREATE INDEX IF NOT EXISTS threads_owner ON threads (owner, created_at);

CREATE TABLE IF NOT EXISTS runs (
    run_id              TEXT PRIMARY KEY,
    thread_id           TEXT NOT NULL,
    owner               TEXT NOT NULL,
    assistant_id        TEXT NOT NULL,
    status              TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    finished_at         TEXT,
    metadata            TEXT NOT NULL DEFAULT '{}',
    kwargs              TEXT NOT NULL,      -- input, command, stream options, config
    multitask_strategy  TEXT NOT NULL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    cancel_reason       TEXT,
    error               TEXT,               -- {"error", "message"} of a failed run, JSON
    idempotency_key     TEXT,
    request_hash        TEXT,
    events_pruned       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_thread ON runs (thread_id, created_at);
CREATE INDEX IF NOT EXISTS runs_active ON runs (status) WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE events_pruned = 0;
CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency
    ON runs (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS run_events (
    run_id  TEXT NOT NULL,  -- no foreign key: a late frame of a deleted run is harmless
    id      INTEGER NOT NULL,
    event   TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;

-- Crons (engine/crons.py): `next_run_at` is the tick a cron fires next, ISO 8601 in
-- UTC (sortable as text); the tick's run is recorded with its move (engine/sqlite/crons.py).
CREATE TABLE IF NOT EXISTS crons (
    cron_id           TEXT PRIMARY KEY,
    owner             TEXT NOT NULL,
    assistant_id      TEXT NOT NULL,
    thread_id         TEXT,                 -- NULL: a new thread per run
    schedule          TEXT NOT NULL,
    timezone          TEXT,
    payload           TEXT NOT NULL,        -- the runs' options, JSON
    metadata          TEXT NOT NULL DEFAULT '{}',
    on_run_completed  TEXT,
    end_time          TEXT,
    enabled           INTEGER NOT NULL DEFAULT 1,
    next_run_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS crons_owner ON crons (owner, created_at);
CREATE INDEX IF NOT EXISTS crons_due ON crons (next_run_at) WHERE enabled = 1;

-- The webhook outbox (engine/webhooks.py): one row per run end to report, queued in the
-- transaction of the run's terminal status; no foreign key, so a run deleted as it
-- ended (rollback, on_completion delete) is still reported. Times to compare are Unix
-- seconds.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    delivery_id      TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL,
    thread_id        TEXT NOT NULL,
    owner            TEXT NOT NULL,
    url              TEXT NOT NULL,
    body             TEXT NOT NULL,            -- the JSON POSTed on every attempt
    status           TEXT NOT NULL DEFAULT 'pending',  -- pending, success, failed
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    next_attempt_at  REAL NOT NULL,
    lease_owner      TEXT,
    lease_expires_at REAL,
    last_error       TEXT
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due
    ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_run ON webhook_deliveries (run_id);

-- Assistants clients created (engine/sqlite/assistants.py): `version` is the latest, the
-- one runs use; each version is written once and never changed.
CREATE TABLE IF NOT EXISTS assistants (
    assistant_id  TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    version       INTEGER NOT NULL,
    created_at    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS assistants_owner ON assistants (owner, created_at);

CREATE TABLE IF NOT EXISTS assistant_versions (
    assistant_id  TEXT NOT NULL,
    version       INTEGER NOT NULL,
    graph_id      TEXT NOT NULL,
    name          TEXT NOT NULL,
    description   TEXT,
    config        TEXT NOT NULL DEFAULT '{}',
    context       TEXT NOT NULL DEFAULT '{}',
    metadata      TEXT NOT NULL DEFAULT '{}',
    created_at    TEXT NOT NULL,
    PRIMARY KEY (assistant_id, version)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS webhook_attempts (
    delivery_id  TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    started_at   TEXT NOT NULL,
    outcome      TEXT NOT NULL,  -- success, http_error, network_error, refused
    status_code  INTEGER,
    latency_ms   REAL NOT NULL,
    error        TEXT,
    excerpt      TEXT,           -- the start of a failing receiver's answer
    PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;

-- Campaigns (engine/campaigns.py): a row per campaign, its request, plan state and items
-- a JSON document written whole while `version` is the one read (engine/sqlite/campaigns.py).
CREATE TABLE IF NOT EXISTS campaigns (
    campaign_id  TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    status       TEXT NOT NULL,   -- planning, planned, running, completed, failed
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    version      INTEGER NOT NULL,
    document     TEXT NOT NULL    -- everything else, JSON
);
CREATE INDEX IF NOT EXISTS campaigns_owner ON campaigns (owner, created_at);
CREATE INDEX IF NOT EXISTS campaigns_active
    ON campaigns (campaign_id) WHERE status IN ('planning', 'running');

-- An approved post handed to its campaign's publisher at its slot, once: a webhook's goes
-- to the outbox (`delivery_id`, status 'outbox'), an MCP call is leased while it is made.
CREATE TABLE IF NOT EXISTS campaign_publications (
    publication_id    TEXT PRIMARY KEY,
    campaign_id       TEXT NOT NULL,
    item_id           TEXT NOT NULL,
    owner             TEXT NOT NULL,
    platform          TEXT NOT NULL,
    transport         TEXT NOT NULL,   -- webhook, mcp
    url               TEXT NOT NULL,
    tool              TEXT,
    arguments         TEXT NOT NULL DEFAULT '{}',
    payload           TEXT NOT NULL,   -- the post as published, JSON
    slot              TEXT NOT NULL,   -- ISO 8601 UTC
    run_id            TEXT NOT NULL,
    thread_id         TEXT NOT NULL,
    status            TEXT NOT NULL DEFAULT 'scheduled',
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   TEXT NOT NULL,   -- ISO 8601 UTC: when it is due
    published_at      TEXT,
    external_id       TEXT,
    answer            TEXT,
    error             TEXT,
    lease_owner       TEXT,
    lease_expires_at  REAL,
    delivery_id       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS campaign_publications_due
    ON campaign_publications (next_attempt_at) WHERE status IN ('scheduled', 'retrying');
CREATE INDEX IF NOT EXISTS campaign_publications_campaign
    ON campaign_publications (campaign_id, slot);

-- Feedback on runs (engine/feedback.py): appended, never changed; deleted with its run.
CREATE TABLE IF NOT EXISTS run_feedback (
    feedback_id  TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    owner        TEXT NOT NULL,
    key          TEXT NOT NULL,
    score        REAL NOT NULL,
    comment      TEXT,
    created_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_feedback_run ON run_feedback (run_id, created_at);
CREATE TRIGGER IF NOT EXISTS run_feedback_of_deleted_run AFTER DELETE ON runs
BEGIN
    DELETE FROM run_feedback WHERE run_id = OLD.run_id;
END;

-- Managed API keys (engine/keys.py): the secret's SHA-256 digest, never the secret; the
-- key id is the owner id its things are recorded under. Times are ISO 8601 in UTC.
CREATE TABLE IF NOT EXISTS api_keys (
    key_id                   TEXT PRIMARY KEY,
    digest                   TEXT NOT NULL UNIQUE,
    prefix                   TEXT NOT NULL,
    name                     TEXT NOT NULL,
    role                     TEXT NOT NULL,
    quotas                   TEXT NOT NULL DEFAULT '{}',  -- overrides, JSON
    created_at               TEXT NOT NULL,
    updated_at               TEXT NOT NULL,
    expires_at               TEXT,
    last_used_at             TEXT,
    revoked_at               TEXT,
    created_by               TEXT,
    webhook_secret           TEXT NOT NULL,
    previous_webhook_secret  TEXT,
    previous_secret_until    TEXT
);
CREATE INDEX IF NOT EXISTS api_keys_created ON api_keys (created_at);

-- The audit trail (engine/audit.py): appended, never changed nor deleted.
CREATE TABLE IF NOT EXISTS audit_log (
    entry_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    actor       TEXT NOT NULL,
    actor_role  TEXT,
    action      TEXT NOT NULL,
    subject     TEXT,
    target      TEXT,
    details     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at);
CREATE INDEX IF NOT EXISTS audit_log_actor ON audit_log (actor, entry_id);
CREATE INDEX IF NOT EXISTS audit_log_subject ON audit_log (subject, entry_id);
CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
-- Quotas and usage (engine/quotas.py, engine/usage.py): an owner's runs under way and of
-- the last minute are counted in the transaction that inserts a run; each run's LLM usage
-- is written with its terminal status, in a table of its own that outlives the run's row
-- (a deleted run still counts toward its owner's month). NULL: unknown, never 0.
CREATE INDEX IF NOT EXISTS runs_owner_created ON runs (owner, created_at);
CREATE INDEX IF NOT EXISTS runs_owner_active ON runs (owner)
    WHERE status IN ('pending', 'running');
CREATE TABLE IF NOT EXISTS run_usage (
    run_id             TEXT PRIMARY KEY,
    owner              TEXT NOT NULL,
    assistant_id       TEXT NOT NULL,
    created_at         TEXT NOT NULL,   -- the run's
    ended_at           TEXT NOT NULL,
    calls              INTEGER,
    prompt_tokens      INTEGER,
    completion_tokens  INTEGER,
    cost               REAL,
    currency           TEXT
);
CREATE INDEX IF NOT EXISTS run_usage_owner_ended ON run_usage (owner, ended_at);
CREATE INDEX IF NOT EXISTS run_usage_owner_created ON run_usage (owner, created_at);
-- Datasets (engine/datasets.py): `next_position` numbers the examples in the order added.
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id     TEXT PRIMARY KEY,
    owner          TEXT NOT NULL,
    name           TEXT NOT NULL,
    description    TEXT,
    metadata       TEXT NOT NULL DEFAULT '{}',
    example_count  INTEGER NOT NULL DEFAULT 0,
    next_position  INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS datasets_owner ON datasets (owner, created_at);
CREATE TABLE IF NOT EXISTS dataset_examples (
    example_id     TEXT PRIMARY KEY,
    dataset_id     TEXT NOT NULL,
    position       INTEGER NOT NULL,
    example_input  TEXT NOT NULL,   -- JSON
    expectations   TEXT,            -- JSON
    source         TEXT,            -- JSON: the thread and run it was made from
    created_at     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dataset_examples_order ON dataset_examples (dataset_id, position);
CREATE TRIGGER IF NOT EXISTS dataset_examples_of_deleted_dataset AFTER DELETE ON datasets
BEGIN
    DELETE FROM dataset_examples WHERE dataset_id = OLD.dataset_id;
END;

-- Experiments (engine/experiments.py): the tasks (a run per example, arm and repetition; a
-- judged pair per example, repetition and pair of arms) carry the progress; the frames of
-- the progress stream are numbered by `last_event_id`. `advanced_at` orders the claims.
CREATE TABLE IF NOT EXISTS experiments (
    experiment_id    TEXT PRIMARY KEY,
    owner            TEXT NOT NULL,
    dataset_id       TEXT NOT NULL,
    name             TEXT,
    arms             TEXT NOT NULL,  -- JSON
    repetitions      INTEGER NOT NULL,
    max_concurrency  INTEGER NOT NULL,
    status           TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT '{}',
    example_count    INTEGER NOT NULL,
    runs_total       INTEGER NOT NULL,
    pairs_total      INTEGER NOT NULL,
    runs_done        INTEGER NOT NULL DEFAULT 0,
    pairs_done       INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    last_event_id    INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    finished_at      TEXT,
    advanced_at      TEXT
);
CREATE INDEX IF NOT EXISTS experiments_owner ON experiments (owner, created_at);
CREATE INDEX IF NOT EXISTS experiments_active ON experiments (advanced_at)
    WHERE status IN ('pending', 'running');
CREATE TABLE IF NOT EXISTS experiment_examples (
    experiment_id  TEXT NOT NULL,
    example_index  INTEGER NOT NULL,
    example_id     TEXT NOT NULL,
    example_input  TEXT NOT NULL,
    expectations   TEXT,
    PRIMARY KEY (experiment_id, example_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS experiment_runs (
    experiment_id  TEXT NOT NULL,
    example_index  INTEGER NOT NULL,
    repetition     INTEGER NOT NULL,
    arm            INTEGER NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending',
    run_id         TEXT,
    thread_id      TEXT,
    result         TEXT,            -- JSON
    error          TEXT,
    PRIMARY KEY (experiment_id, example_index, repetition, arm)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS experiment_pairs (
    experiment_id  TEXT NOT NULL,
    example_index  INTEGER NOT NULL,
    repetition     INTEGER NOT NULL,
    arm_a          INTEGER NOT NULL,
    arm_b          INTEGER NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending',
    run_id         TEXT,
    thread_id      TEXT,
    winner         TEXT,
    result         TEXT,            -- JSON
    error          TEXT,
    PRIMARY KEY (experiment_id, example_index, repetition, arm_a, arm_b)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS experiment_events (
    experiment_id  TEXT NOT NULL,
    id             INTEGER NOT NULL,
    event          TEXT NOT NULL,
    data           TEXT NOT NULL,
    PRIMARY KEY (experiment_id, id)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS experiment_parts_of_deleted_experiment AFTER DELETE ON experiments
BEGIN
    DELETE FROM experiment_examples WHERE experiment_id = OLD.experiment_id;
    DELETE FROM experiment_runs WHERE experiment_id = OLD.experiment_id;
    DELETE FROM experiment_pairs WHERE experiment_id = OLD.experiment_id;
    DELETE FROM experiment_events WHERE experiment_id = OLD.experiment_id;
END;

-- Online evaluation (engine/online_evaluation.py): a sampling rate per key and assistant,
-- and one row per live run looked at (its judge's run, its verdict), deleted with the run.
CREATE TABLE IF NOT EXISTS evaluation_settings (
    owner         TEXT NOT NULL,
    assistant_id  TEXT NOT NULL,
    sample_rate   REAL NOT NULL,
    since         TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (owner, assistant_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS online_judgements (
    run_id           TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL,
    owner            TEXT NOT NULL,
    assistant_id     TEXT NOT NULL,
    finished_at      TEXT NOT NULL,
    status           TEXT NOT NULL,  -- skipped, pending, judging, done, error
    judge_run_id     TEXT,
    judge_thread_id  TEXT,
    score            REAL,
    passed           INTEGER,
    error            TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS online_judgements_open ON online_judgements (created_at)
    WHERE status IN ('pending', 'judging');
CREATE INDEX IF NOT EXISTS online_judgements_window
    ON online_judgements (owner, assistant_id, finished_at);
CREATE INDEX IF NOT EXISTS runs_owner_assistant ON runs (owner, assistant_id, finished_at);
CREATE TRIGGER IF NOT EXISTS online_judgements_of_deleted_run AFTER DELETE ON runs
BEGIN
    DELETE FROM online_judgements WHERE run_id = OLD.run_id;
END;
"""

#: Columns added to tables after their first release, by table: a database made by an
#: older version gets them when it is opened (`ALTER TABLE … ADD COLUMN`, in place).
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    # Retention (engine/retention.py): a thread's TTL, when it runs out (Unix seconds),
    # and the sweep that claimed it (`sweep_owner` until `sweep_until`, Unix seconds).
    "threads": (
        ("ttl_strategy", "TEXT"),
        ("ttl_minutes", "REAL"),
        ("expires_at", "REAL"),
        ("sweep_owner", "TEXT"),
        ("sweep_until", "REAL"),
    ),
}

#: What needs the added columns, run once they exist.
AFTER_COLUMNS = """
CREATE INDEX IF NOT EXISTS threads_expiry ON threads (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_deliveries_ended
    ON webhook_deliveries (updated_at) WHERE status <> 'pending';
"""


async def add_columns(conn: aiosqlite.Connection) -> None:
    """Add the columns of `ADDED_COLUMNS` a table lacks, then their indexes (in a transaction)."""
    for table, columns in ADDED_COLUMNS.items():
        async with conn.execute(f"PRAGMA table_info({table})") as cursor:
            present = {row[1] for row in await cursor.fetchall()}
        for name, kind in columns:
            if name not in present:
                await conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
    for statement in AFTER_COLUMNS.split(";"):
        if statement.strip():
            await conn.execute(statement)


class SqliteDatabase:
    """The writer and reader connections to one SQLite file, with the run engine's tables."""

    def __init__(self, path: str, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """Bind to a database file; nothing is opened yet."""
        self.path = path
        self.busy_timeout = busy_timeout
        self._conn: aiosqlite.Connection | None = None  # the writer
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()

    async def _connect(self, *, query_only: bool) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            if query_only:
                await conn.execute("PRAGMA query_only=1")
            else:
                await conn.execute("PRAGMA journal_mode=WAL")
                await conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
        except BaseException:
            await conn.close()
            raise
        return conn

    async def open(self) -> Self:
        """Connect (a writer and a reader), create the tables and add the columns they lack."""
        conn = await self._connect(query_only=False)
        try:
            async with self._write_lock:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    await conn.executescript(SCHEMA)  # commits
                    await conn.execute("BEGIN IMMEDIATE")
                    await add_columns(conn)
                    await conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        await conn.execute("ROLLBACK")
                    raise
            self._reader = await self._connect(query_only=True)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return self

    @property
    def is_open(self) -> bool:
        """Whether the connections are open."""
        return self._conn is not None

    async def close(self) -> None:
        """Close the connections; idempotent."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    @property
    def _db(self) -> aiosqlite.Connection:
        """The writer connection (writes only, inside `transaction`)."""
        if self._conn is None:
            raise RuntimeError("the run database is not open")
        return self._conn

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run a query on the reader and return all its rows (one hop to its thread).

        The statement is stepped to its end and reset in one call, so the reader
        never keeps a snapshot open between awaits.
        """
        if self._reader is None:
            raise RuntimeError("the run database is not open")
        return list(await self._reader.execute_fetchall(sql, params))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Run statements in one write transaction (BEGIN IMMEDIATE … COMMIT) on the writer.

        The writer holds no read when it begins, so `BEGIN IMMEDIATE` waits up to the
        busy timeout for the lock instead of failing at once. A failed COMMIT (a full
        disk) is rolled back, so the connection is never left inside a transaction.
        """
        async with self._write_lock:
            db = self._db
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                await db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        await db.execute("ROLLBACK")
                raise

    async def execute(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Run statements in one write transaction (maintenance and tests)."""
        async with self.transaction() as db:
            for sql, params in statements:
                await db.execute(sql, params)


def query_database_file(path: Path, timeout: float) -> None:
    """Open a database file read-only (never creating it) and run a query (readiness).

    Raises:
        FileNotFoundError: The file is missing.
        sqlite3.Error: The file cannot be read as a database.
    """
    if not path.is_file():
        raise FileNotFoundError("the database file is missing")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        conn.close()
