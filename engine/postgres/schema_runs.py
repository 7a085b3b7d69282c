"""The SQL of PostgreSQL schema versions 1–7: runs, threads and their events, notes and
assets, the webhook outbox, crons, feedback, knowledge namespaces, created assistants.

`engine.postgres.migrations` applies them in order; each text is one migration's.
"""

# Schema version 1. Types follow what each column holds: timestamps are `timestamptz`
# (the lease expiry is compared with the database clock, never a replica's), metadata is
# `jsonb` (threads are searched by metadata containment), and payloads written with
# `engine.serde.dumps` (state, kwargs, errors, frames) are `text`: they are served
# as written, and jsonb would reorder keys and refuse a `\u0000` that a model produced.
V1 = """
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
V2 = """
DROP INDEX runs_lease_expiry;
ALTER TABLE runs SET (fillfactor = 80);
"""

# Schema version 3: the webhook outbox (engine/webhooks.py). A delivery is queued in the
# transaction of its run's terminal status; no foreign key to runs, so a run deleted
# as it ended is still reported. Deliverers claim due rows with FOR UPDATE SKIP LOCKED
# and a lease compared with the database clock.
V3 = """
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
V4 = """
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
V5 = """
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
V6 = """
ALTER TABLE knowledge_notes ADD COLUMN namespace text NOT NULL DEFAULT 'shared';
ALTER TABLE knowledge_notes ADD COLUMN principal text;
CREATE INDEX knowledge_notes_namespace ON knowledge_notes (namespace, principal);
"""

# Schema version 7. Assistants clients created (engine/postgres/assistants.py): `version`
# is the latest, the one runs use; each version is written once and never changed, and
# goes with its assistant. Searches match the latest version's metadata by containment.
V7 = """
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
