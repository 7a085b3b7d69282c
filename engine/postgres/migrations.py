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

Rules for a new migration: append it, never edit or reorder a released one, and keep it
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


# Schema version 1. Types follow what each column holds: timestamps are `timestamptz`
# (the lease expiry is compared with the database clock, never a replica's), metadata is
# `jsonb` (threads are searched by metadata containment), and payloads written with
# `engine.serde.dumps` (state, kwargs, errors, frames) are `text`: they are served
# as written, and jsonb would reorder keys and refuse a `\u0000` that a model produced.
_V1 = """
CREATE TABLE threads (
    thread_id   text PRIMARY KEY,
    owner       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    metadata    jsonb NOT NULL DEFAULT '{}',
    status      text NOT NULL DEFAULT 'idle'
                CHECK (status IN ('idle', 'busy', 'interrupted', 'error')),
    state       text,                           -- values after the last run, JSON
    interrupts  text NOT NULL DEFAULT '{}'      -- pending interrupts by task id, JSON
);
CREATE INDEX threads_owner ON threads (owner, created_at);
CREATE INDEX threads_metadata ON threads USING gin (metadata jsonb_path_ops);

-- The runs table is also the queue: a worker claims the oldest pending run (`seq`
-- order) of a thread that has no running run, with SELECT ... FOR UPDATE SKIP LOCKED.
CREATE TABLE runs (
    run_id              text PRIMARY KEY,
    seq                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,  -- enqueue order
    thread_id           text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    owner               text NOT NULL,
    assistant_id        text NOT NULL,
    status              text NOT NULL CHECK (status IN
                        ('pending', 'running', 'success', 'error', 'timeout', 'interrupted')),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    metadata            jsonb NOT NULL DEFAULT '{}',
    kwargs              text NOT NULL,      -- input, command, stream options, config (JSON)
    multitask_strategy  text NOT NULL,
    attempt             integer NOT NULL DEFAULT 0,
    cancel_reason       text,
    error               text,               -- {"error", "message"} of a failed run, JSON
    idempotency_key     text,
    request_hash        text,
    events_pruned       boolean NOT NULL DEFAULT false,
    -- Leases with fencing: a claim sets the owner, bumps the epoch and sets the expiry
    -- from the database clock; a write by a worker counts only while owner and epoch
    -- still match. NULL owner and expiry: nobody holds the run.
    lease_owner         text,
    lease_epoch         bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    -- A cancel asked from any replica ('interrupt' or 'rollback'): the executing worker
    -- reads it on every heartbeat, so a Redis signal it missed still stops the run.
    cancel_requested    text CHECK (cancel_requested IN ('interrupt', 'rollback')),
    CHECK (status <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
-- At most one running run per thread, enforced by the database for every process.
CREATE UNIQUE INDEX runs_one_running_per_thread ON runs (thread_id) WHERE status = 'running';
CREATE INDEX runs_pending ON runs (seq) WHERE status = 'pending';
CREATE INDEX runs_pending_thread ON runs (thread_id, seq) WHERE status = 'pending';
CREATE INDEX runs_lease_expiry ON runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_finished ON runs (finished_at)
    WHERE NOT events_pruned AND finished_at IS NOT NULL;
CREATE UNIQUE INDEX runs_idempotency ON runs (owner, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The event log: frame ids are `seq`, 1..n per run. No foreign key to runs: a late
-- frame of a deleted run is harmless, and the run's delete removes its log.
CREATE TABLE run_events (
    run_id  text NOT NULL,
    seq     bigint NOT NULL CHECK (seq > 0),
    event   text NOT NULL,
    data    text NOT NULL,     -- compact JSON, one line, served as stored
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE knowledge_notes (
    id          text PRIMARY KEY,
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,  -- insertion (list) order
    type        text NOT NULL,
    status      text NOT NULL,
    content     text NOT NULL,
    tags        text[] NOT NULL DEFAULT '{}',
    owner       text NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX knowledge_notes_status ON knowledge_notes (status);
CREATE INDEX knowledge_notes_type ON knowledge_notes (type);

-- Generated and uploaded images, keyed by content hash (providers/assets.py), so every
-- replica serves every asset. The bytes are already compressed images: stored
-- out of line without another round of compression.
CREATE TABLE assets (
    asset_id      text PRIMARY KEY CHECK (asset_id ~ '^[0-9a-f]{32}$'),
    content_type  text NOT NULL,
    width         integer NOT NULL CHECK (width >= 1),
    height        integer NOT NULL CHECK (height >= 1),
    bytes         integer NOT NULL CHECK (bytes >= 1),
    kind          text NOT NULL CHECK (kind IN ('generated', 'uploaded')),
    slot          integer,
    prompt        text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    extra         jsonb NOT NULL DEFAULT '{}',
    data          bytea NOT NULL
);
ALTER TABLE assets ALTER COLUMN data SET STORAGE EXTERNAL;
"""

# Schema version 2. A lease renewal, the most frequent write of a running run, changes
# `lease_expires_at` alone: with no index on that column, PostgreSQL writes the new row
# version in the same page without touching an index (a HOT update), and the pages of
# `runs` keep a fifth free for such versions. The sweep finds the expired leases among
# the running runs, which `runs_one_running_per_thread` indexes.
_V2 = """
DROP INDEX runs_lease_expiry;
ALTER TABLE runs SET (fillfactor = 80);
"""

# Schema version 3: the webhook outbox (engine/webhooks.py). A delivery is queued in the
# transaction of its run's terminal status; no foreign key to runs, so a run deleted
# as it ended is still reported. Deliverers claim due rows with FOR UPDATE SKIP LOCKED
# and a lease compared with the database clock.
_V3 = """
CREATE TABLE webhook_deliveries (
    delivery_id       text PRIMARY KEY,
    run_id            text NOT NULL,
    thread_id         text NOT NULL,
    owner             text NOT NULL,
    url               text NOT NULL,
    body              text NOT NULL,        -- the JSON POSTed on every attempt
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'success', 'failed')),
    attempts          integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    last_error        text
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run_id);

CREATE TABLE webhook_attempts (
    delivery_id  text NOT NULL REFERENCES webhook_deliveries (delivery_id) ON DELETE CASCADE,
    attempt      integer NOT NULL CHECK (attempt >= 1),
    started_at   timestamptz NOT NULL,
    outcome      text NOT NULL
                 CHECK (outcome IN ('success', 'http_error', 'network_error', 'refused')),
    status_code  integer,
    latency_ms   double precision NOT NULL,
    error        text,
    excerpt      text,                      -- the start of a failing receiver's answer
    PRIMARY KEY (delivery_id, attempt)
);
"""

# Schema version 4. Crons (engine/crons.py): `next_run_at` is the tick a cron fires next.
# A scheduler claims a due cron with `SELECT … FOR UPDATE SKIP LOCKED` and, in the same
# transaction, records the tick's run and moves `next_run_at` on (engine/postgres/crons.py).
# No foreign key to threads: a thread's cron outlives a deleted thread, and its ticks are
# then skipped (the run request is refused), as they are for a deleted assistant.
_V4 = """
CREATE TABLE crons (
    cron_id           text PRIMARY KEY,
    owner             text NOT NULL,
    assistant_id      text NOT NULL,
    thread_id         text,                 -- NULL: a new thread per run
    schedule          text NOT NULL,
    timezone          text,
    payload           jsonb NOT NULL DEFAULT '{}',   -- the runs' options
    metadata          jsonb NOT NULL DEFAULT '{}',
    on_run_completed  text CHECK (on_run_completed IN ('delete', 'keep')),
    end_time          timestamptz,
    enabled           boolean NOT NULL DEFAULT true,
    next_run_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX crons_owner ON crons (owner, created_at);
CREATE INDEX crons_metadata ON crons USING gin (metadata jsonb_path_ops);
CREATE INDEX crons_due ON crons (next_run_at) WHERE enabled;
"""

# Schema version 5. Feedback on runs (engine/feedback.py): appended, never changed, and
# deleted with its run (and so with its thread). The API key that owns the run wrote it.
_V5 = """
CREATE TABLE run_feedback (
    feedback_id  text PRIMARY KEY,
    run_id       text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    thread_id    text NOT NULL,
    owner        text NOT NULL,
    key          text NOT NULL,
    score        double precision NOT NULL,
    comment      text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_feedback_run ON run_feedback (run_id, created_at);
"""

# Schema version 6. Knowledge notes live in namespaces (a brand's `knowledge_namespace`, or
# 'shared', which every run reads) and may belong to the API key that wrote them
# (`principal`, the key's owner id). The notes written before are shared and owner-less:
# every key keeps seeing them, as it did.
_V6 = """
ALTER TABLE knowledge_notes ADD COLUMN namespace text NOT NULL DEFAULT 'shared';
ALTER TABLE knowledge_notes ADD COLUMN principal text;
CREATE INDEX knowledge_notes_namespace ON knowledge_notes (namespace, principal);
"""

# Schema version 7. Assistants clients created (engine/postgres/assistants.py): `version`
# is the latest, the one runs use; each version is written once and never changed, and
# goes with its assistant. Searches match the latest version's metadata by containment.
_V7 = """
CREATE TABLE assistants (
    assistant_id  text PRIMARY KEY,
    owner         text NOT NULL,
    version       integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX assistants_owner ON assistants (owner, created_at);
CREATE TABLE assistant_versions (
    assistant_id  text NOT NULL REFERENCES assistants (assistant_id) ON DELETE CASCADE,
    version       integer NOT NULL,
    graph_id      text NOT NULL,
    name          text NOT NULL,
    description   text,
    config        jsonb NOT NULL DEFAULT '{}',
    context       jsonb NOT NULL DEFAULT '{}',
    metadata      jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (assistant_id, version)
);
CREATE INDEX assistant_versions_metadata ON assistant_versions USING gin (metadata jsonb_path_ops);
"""

# Schema version 8. Managed API keys (engine/keys.py): the secret's SHA-256 digest, never
# the secret; the key id is the owner id its things are recorded under. The audit trail
# (engine/audit.py), which a trigger keeps append-only. A revoked key's pending webhook
# deliveries end `cancelled`.
_V8 = """
CREATE TABLE api_keys (
    key_id                   text PRIMARY KEY,
    digest                   text NOT NULL UNIQUE,
    prefix                   text NOT NULL,
    name                     text NOT NULL,
    role                     text NOT NULL CHECK (role IN ('admin', 'member', 'read-only')),
    quotas                   jsonb NOT NULL DEFAULT '{}',
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    expires_at               timestamptz,
    last_used_at             timestamptz,
    revoked_at               timestamptz,
    created_by               text,
    webhook_secret           text NOT NULL,
    previous_webhook_secret  text,
    previous_secret_until    timestamptz
);
CREATE INDEX api_keys_created ON api_keys (created_at);

CREATE TABLE audit_log (
    entry_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    actor_role  text,
    action      text NOT NULL,
    subject     text,
    target      text,
    details     jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_actor ON audit_log (actor, entry_id);
CREATE INDEX audit_log_subject ON audit_log (subject, entry_id);
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
    CHECK (status IN ('pending', 'success', 'failed', 'cancelled'));
"""

# Schema version 9. Quotas and usage (engine/quotas.py, engine/usage.py). A run's insert
# counts its owner's runs under way and of the last minute (indexed by owner); each run's
# LLM usage is a row of its own, written with its terminal status and kept when the run is
# deleted (a deleted run still counts toward its owner's month); NULL is unknown, never 0.
# The Store's bytes per item (joined with LangGraph's `store` when summed) and the
# per-minute search counts are kept here too.
_V9 = """
CREATE INDEX runs_owner_created ON runs (owner, created_at);
CREATE INDEX runs_owner_active ON runs (owner) WHERE status IN ('pending', 'running');
CREATE TABLE run_usage (
    run_id             text PRIMARY KEY,
    owner              text NOT NULL,
    assistant_id       text NOT NULL,
    created_at         timestamptz NOT NULL,     -- the run's
    ended_at           timestamptz NOT NULL DEFAULT now(),
    calls              integer CHECK (calls >= 0),
    prompt_tokens      bigint CHECK (prompt_tokens >= 0),
    completion_tokens  bigint CHECK (completion_tokens >= 0),
    cost               double precision CHECK (cost >= 0),
    currency           text
);
CREATE INDEX run_usage_owner_ended ON run_usage (owner, ended_at);
CREATE INDEX run_usage_owner_created ON run_usage (owner, created_at);
CREATE TABLE store_item_bytes (
    prefix  text NOT NULL,
    key     text NOT NULL,
    owner   text NOT NULL,
    bytes   bigint NOT NULL CHECK (bytes >= 0),
    PRIMARY KEY (prefix, key)
);
CREATE INDEX store_item_bytes_owner ON store_item_bytes (owner);
CREATE TABLE quota_windows (
    owner         text NOT NULL,
    kind          text NOT NULL,
    window_start  timestamptz NOT NULL,
    count         integer NOT NULL CHECK (count >= 0),
    PRIMARY KEY (owner, kind, window_start)
);
"""

# Schema version 10. Retention (engine/retention.py): a thread's TTL, when it runs out, and
# the sweep that claimed it (`sweep_owner` until `sweep_until`; sweeps claim expired
# threads with FOR UPDATE SKIP LOCKED, so two processes never sweep one thread); ended
# webhook deliveries are found by age to be pruned.
_V10 = """
ALTER TABLE threads ADD COLUMN ttl_strategy text CHECK (ttl_strategy IN ('delete', 'keep_latest'));
ALTER TABLE threads ADD COLUMN ttl_minutes double precision CHECK (ttl_minutes > 0);
ALTER TABLE threads ADD COLUMN expires_at timestamptz;
ALTER TABLE threads ADD COLUMN sweep_owner text;
ALTER TABLE threads ADD COLUMN sweep_until timestamptz;
CREATE INDEX threads_expiry ON threads (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (updated_at)
    WHERE status <> 'pending';
"""

# Schema version 11. Datasets and experiments (engine/datasets.py, engine/experiments.py)
# and online evaluation (engine/online_evaluation.py). An experiment's tasks carry its
# progress; a pass claims the experiment row with FOR UPDATE SKIP LOCKED and writes its
# tasks, status and frames in that transaction (engine/postgres/experiments.py). Payloads
# (inputs, results) are text written with `engine.serde.dumps`, as runs' are; metadata is
# jsonb (searched by containment). A judgement row goes with its run.
_V11 = """
CREATE TABLE datasets (
    dataset_id     text PRIMARY KEY,
    owner          text NOT NULL,
    name           text NOT NULL,
    description    text,
    metadata       jsonb NOT NULL DEFAULT '{}',
    example_count  integer NOT NULL DEFAULT 0 CHECK (example_count >= 0),
    next_position  integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX datasets_owner ON datasets (owner, created_at);
CREATE INDEX datasets_metadata ON datasets USING gin (metadata jsonb_path_ops);
CREATE TABLE dataset_examples (
    example_id     text PRIMARY KEY,
    dataset_id     text NOT NULL REFERENCES datasets (dataset_id) ON DELETE CASCADE,
    position       integer NOT NULL,
    example_input  text NOT NULL,
    expectations   text,
    source         text,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dataset_examples_order ON dataset_examples (dataset_id, position);

CREATE TABLE experiments (
    experiment_id    text PRIMARY KEY,
    owner            text NOT NULL,
    dataset_id       text NOT NULL,
    name             text,
    arms             text NOT NULL,
    repetitions      integer NOT NULL CHECK (repetitions >= 1),
    max_concurrency  integer NOT NULL CHECK (max_concurrency >= 1),
    status           text NOT NULL
                     CHECK (status IN ('pending', 'running', 'success', 'error', 'cancelled')),
    metadata         jsonb NOT NULL DEFAULT '{}',
    example_count    integer NOT NULL,
    runs_total       integer NOT NULL,
    pairs_total      integer NOT NULL,
    runs_done        integer NOT NULL DEFAULT 0,
    pairs_done       integer NOT NULL DEFAULT 0,
    error            text,
    last_event_id    bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    advanced_at      timestamptz
);
CREATE INDEX experiments_owner ON experiments (owner, created_at);
CREATE INDEX experiments_active ON experiments (advanced_at)
    WHERE status IN ('pending', 'running');
CREATE TABLE experiment_examples (
    experiment_id  text NOT NULL REFERENCES experiments (experiment_id) ON DELETE CASCADE,
    example_index  integer NOT NULL,
    example_id     text NOT NULL,
    example_input  text NOT NULL,
    expectations   text,
    PRIMARY KEY (experiment_id, example_index)
);
CREATE TABLE experiment_runs (
    experiment_id  text NOT NULL REFERENCES experiments (experiment_id) ON DELETE CASCADE,
    example_index  integer NOT NULL,
    repetition     integer NOT NULL,
    arm            integer NOT NULL,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'running', 'done', 'error', 'cancelled')),
    run_id         text,
    thread_id      text,
    result         text,
    error          text,
    PRIMARY KEY (experiment_id, example_index, repetition, arm)
);
CREATE TABLE experiment_pairs (
    experiment_id  text NOT NULL REFERENCES experiments (experiment_id) ON DELETE CASCADE,
    example_index  integer NOT NULL,
    repetition     integer NOT NULL,
    arm_a          integer NOT NULL,
    arm_b          integer NOT NULL,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'running', 'done', 'error', 'cancelled')),
    run_id         text,
    thread_id      text,
    winner         text CHECK (winner IN ('a', 'b', 'tie')),
    result         text,
    error          text,
    PRIMARY KEY (experiment_id, example_index, repetition, arm_a, arm_b)
);
CREATE TABLE experiment_events (
    experiment_id  text NOT NULL REFERENCES experiments (experiment_id) ON DELETE CASCADE,
    id             bigint NOT NULL CHECK (id > 0),
    event          text NOT NULL,
    data           text NOT NULL,
    PRIMARY KEY (experiment_id, id)
);

CREATE TABLE evaluation_settings (
    owner         text NOT NULL,
    assistant_id  text NOT NULL,
    sample_rate   double precision NOT NULL CHECK (sample_rate >= 0 AND sample_rate <= 1),
    since         timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, assistant_id)
);
CREATE TABLE online_judgements (
    run_id           text PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    thread_id        text NOT NULL,
    owner            text NOT NULL,
    assistant_id     text NOT NULL,
    finished_at      timestamptz NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('skipped', 'pending', 'judging', 'done', 'error')),
    judge_run_id     text,
    judge_thread_id  text,
    score            double precision,
    passed           boolean,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX online_judgements_open ON online_judgements (created_at)
    WHERE status IN ('pending', 'judging');
CREATE INDEX online_judgements_window ON online_judgements (owner, assistant_id, finished_at);
CREATE INDEX runs_owner_assistant ON runs (owner, assistant_id, finished_at);
"""

# Schema version 12. Campaigns (engine/campaigns.py, engine/postgres/campaigns.py): a row per
# campaign, its request, plan state and items a JSON document written whole while `version`
# is the one read; a driver pass leases an active campaign (`driver_until`, compared with
# the database clock) taken with FOR UPDATE SKIP LOCKED, and drives it outside a transaction.
# Publications are claimed the same way when due: a webhook's is queued in the outbox
# (`delivery_id`), an MCP call is leased (a lease compared with the database clock) while
# it is made. No foreign key to threads or runs: a campaign outlives a deleted thread.
_V12 = """
CREATE TABLE campaigns (
    campaign_id  text PRIMARY KEY,
    owner        text NOT NULL,
    status       text NOT NULL
                 CHECK (status IN ('planning', 'planned', 'running', 'completed', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    version      integer NOT NULL,
    document     text NOT NULL,       -- everything else, JSON (engine.serde.dumps)
    driver_until timestamptz          -- a driver pass holds it until then (NULL: nobody)
);
CREATE INDEX campaigns_owner ON campaigns (owner, created_at);
CREATE INDEX campaigns_active ON campaigns (campaign_id) WHERE status IN ('planning', 'running');

CREATE TABLE campaign_publications (
    publication_id    text PRIMARY KEY,
    campaign_id       text NOT NULL REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
    item_id           text NOT NULL,
    owner             text NOT NULL,
    platform          text NOT NULL,
    transport         text NOT NULL CHECK (transport IN ('webhook', 'mcp')),
    url               text NOT NULL,
    tool              text,
    arguments         jsonb NOT NULL DEFAULT '{}',
    payload           text NOT NULL,    -- the post as published, JSON
    slot              timestamptz NOT NULL,
    run_id            text NOT NULL,
    thread_id         text NOT NULL,
    status            text NOT NULL DEFAULT 'scheduled' CHECK (status IN
                      ('scheduled', 'sending', 'retrying', 'published', 'failed', 'unknown',
                       'outbox')),
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL,
    published_at      timestamptz,
    external_id       text,
    answer            text,
    error             text,
    lease_owner       text,
    lease_expires_at  timestamptz,
    delivery_id       text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaign_publications_due ON campaign_publications (next_attempt_at)
    WHERE status IN ('scheduled', 'retrying');
CREATE INDEX campaign_publications_campaign ON campaign_publications (campaign_id, slot);
"""

#: Every migration, in order; `MIGRATIONS[i].version == i + 1`.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "threads, runs, events, notes, assets", _V1),
    Migration(2, "lease renewals update runs in place", _V2),
    Migration(3, "webhook outbox", _V3),
    Migration(4, "crons", _V4),
    Migration(5, "run feedback", _V5),
    Migration(6, "knowledge notes in namespaces, owned by keys", _V6),
    Migration(7, "assistants and their versions", _V7),
    Migration(8, "managed API keys and the audit trail", _V8),
    Migration(9, "quotas and usage per key", _V9),
    Migration(10, "thread TTLs and retention sweeps", _V10),
    Migration(11, "datasets, experiments and online evaluation", _V11),
    Migration(12, "campaigns and their publications", _V12),
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
