"""The SQL of PostgreSQL schema versions 8–12: what a team shares — managed keys and the
audit trail, quotas and usage, retention, datasets and experiments, campaigns.

`engine.postgres.migrations` applies them in order; each text is one migration's.
"""

# Schema version 8. Managed API keys (engine/keys.py): the secret's SHA-256 digest, never
# the secret; the key id is the owner id its things are recorded under. The audit trail
# (engine/audit.py), which a trigger keeps append-only. A revoked key's pending webhook
# deliveries end `cancelled`.
V8 = """
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
V9 = """
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
V10 = """
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
V11 = """
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
V12 = """
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
