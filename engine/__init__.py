"""The run engine: assistants run as runs on threads, with their streams, stored and recovered.

This module is the engine's public surface: what an adapter (`app/`, `cli/`, the
product's assistants) may use. Open an engine with `open_engine`; start a run with a
`RunSpec` on `Engine.runs`; read its frames with `follow_frames`. Everything else
under `engine/` is the engine's own business (its backends in `engine/sqlite/` and
`engine/postgres/`). It imports nothing of the product. See docs/architecture.md.
"""

from engine.assistants import (
    Assistant,
    AssistantFactory,
    AssistantRecord,
    AssistantSpec,
    IfExists,
    build_assistants,
    registry,
)
from engine.audit import AUDIT_ACTIONS, CLI, Actor, AuditAction, AuditRecord
from engine.crons import CronRecord, OnRunCompleted, check_schedule, check_timezone, utc_now
from engine.datasets import (
    MAX_DATASETS_PER_OWNER,
    MAX_DESCRIPTION_CHARS,
    MAX_EXAMPLES_PER_DATASET,
    MAX_EXAMPLES_PER_REQUEST,
    MAX_NAME_CHARS,
    MAX_THREADS_PER_REQUEST,
    DatasetRecord,
    ExampleInput,
    ExampleRecord,
)
from engine.errors import (
    DATABASE_UNAVAILABLE,
    Conflict,
    Invalid,
    InvalidFields,
    NotFound,
    NotReadyError,
    RunsError,
    Unavailable,
)
from engine.experiments import (
    DEFAULT_CONCURRENCY,
    EXPERIMENT_STATUSES,
    MAX_ARMS,
    MAX_CONCURRENCY,
    MAX_REPETITIONS,
    MIN_ARMS,
    Arm,
    EvaluationHooks,
    ExperimentRecord,
    ExperimentStatus,
    PairOutcome,
    PostJudgement,
    PostOutcome,
)
from engine.feedback import (
    FEEDBACK_KEY_PATTERN,
    MAX_COMMENT_CHARS,
    MAX_FEEDBACK_PER_RUN,
    MAX_SCORE,
    FeedbackRecord,
)
from engine.follow import IDLE, Idle, Stopped, follow_frames
from engine.frames import (
    CONTROL_EVENTS,
    SCHEMA_VERSION,
    STREAM_MODES,
    UNSUPPORTED_STREAM_MODES,
    StreamModeName,
    graph_mode,
)
from engine.keys import (
    ANONYMOUS,
    KEY_ID_PATTERN,
    KEY_ROLES,
    MAX_QUOTA,
    KeyRecord,
    KeyRole,
    KeyState,
    OwnerCheck,
    Revocation,
    SigningSecrets,
    is_key_secret,
    owner_id_for,
)
from engine.online_evaluation import JUDGE_KEY, QUALITY_KEY, EvaluationSetting
from engine.opener import ContextOpener, Engine, QuotaOverrides, Role, open_engine, open_keys
from engine.protocols import DatabasePools, RunFrames
from engine.quotas import (
    QUOTA_NAMES,
    Limits,
    QuotaExceeded,
    check_quotas,
    limits_from_settings,
)
from engine.records import (
    RUN_STATUSES,
    TTL_STRATEGIES,
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    ThreadRecord,
    ThreadStatus,
    ThreadTTL,
    TtlStrategy,
)
from engine.request_scope import request_scope
from engine.retention import MAX_TTL_MINUTES, RetentionConfig, SweepReport
from engine.serde import dumps, loads, to_jsonable
from engine.services import (
    AssistantsService,
    AuditService,
    CronsService,
    DatasetsService,
    ExperimentsService,
    FeedbackService,
    KeysService,
    OnlineEvaluationService,
    RetentionService,
    RunsService,
    ThreadsService,
    UsageReport,
    UsageService,
    WebhooksService,
)
from engine.services.keys import CreatedKey
from engine.spec import IfNotExists, MultitaskStrategy, RunOptions, RunSpec
from engine.sqlite.database import query_database_file
from engine.sqlite.ownership import DataDirInUse
from engine.store import (
    MAX_CANDIDATES,
    MAX_QUERY_CHARS,
    MAX_RANKED_CHARS,
    EmbeddingsUnavailable,
    QueryRanker,
    ScopedStore,
    item_text,
)
from engine.tracing import GraphSpans, RunTracing, trace_headers
from engine.usage import RunMeter, RunUsage, UsageReading, UsageTotals
from engine.webhook_signing import MappingWebhookSecrets, WebhookSecrets
from engine.webhooks import ATTEMPT_OUTCOMES, DELIVERY_OUTCOMES, OutboxTotals


async def upgrade_schema(database_url: str) -> int:
    """Apply the PostgreSQL schema migrations `database_url` lacks; return its version.

    Raises:
        ImportError: The scale-out extra (psycopg) is not installed.
    """
    from engine.postgres.migrations import upgrade_url  # the scale-out extra

    return await upgrade_url(database_url)


__all__ = [
    "ANONYMOUS",
    "ATTEMPT_OUTCOMES",
    "AUDIT_ACTIONS",
    "CLI",
    "CONTROL_EVENTS",
    "DATABASE_UNAVAILABLE",
    "DEFAULT_CONCURRENCY",
    "DELIVERY_OUTCOMES",
    "EXPERIMENT_STATUSES",
    "FEEDBACK_KEY_PATTERN",
    "IDLE",
    "JUDGE_KEY",
    "KEY_ID_PATTERN",
    "KEY_ROLES",
    "MAX_ARMS",
    "MAX_CANDIDATES",
    "MAX_COMMENT_CHARS",
    "MAX_CONCURRENCY",
    "MAX_DATASETS_PER_OWNER",
    "MAX_DESCRIPTION_CHARS",
    "MAX_EXAMPLES_PER_DATASET",
    "MAX_EXAMPLES_PER_REQUEST",
    "MAX_FEEDBACK_PER_RUN",
    "MAX_NAME_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_QUOTA",
    "MAX_RANKED_CHARS",
    "MAX_REPETITIONS",
    "MAX_SCORE",
    "MAX_THREADS_PER_REQUEST",
    "MAX_TTL_MINUTES",
    "MIN_ARMS",
    "QUALITY_KEY",
    "QUOTA_NAMES",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "STREAM_MODES",
    "TTL_STRATEGIES",
    "UNSUPPORTED_STREAM_MODES",
    "Actor",
    "Arm",
    "Assistant",
    "AssistantFactory",
    "AssistantRecord",
    "AssistantSpec",
    "AssistantsService",
    "AuditAction",
    "AuditRecord",
    "AuditService",
    "CancelAction",
    "Conflict",
    "ContextOpener",
    "CreatedKey",
    "CronRecord",
    "CronsService",
    "DataDirInUse",
    "DatabasePools",
    "DatasetRecord",
    "DatasetsService",
    "EmbeddingsUnavailable",
    "Engine",
    "EvaluationHooks",
    "EvaluationSetting",
    "ExampleInput",
    "ExampleRecord",
    "ExperimentRecord",
    "ExperimentStatus",
    "ExperimentsService",
    "FeedbackRecord",
    "FeedbackService",
    "Frame",
    "GraphSpans",
    "Idle",
    "IfExists",
    "IfNotExists",
    "Invalid",
    "InvalidFields",
    "KeyRecord",
    "KeyRole",
    "KeyState",
    "KeysService",
    "Limits",
    "MappingWebhookSecrets",
    "MultitaskStrategy",
    "NotFound",
    "NotReadyError",
    "OnRunCompleted",
    "OnlineEvaluationService",
    "OutboxTotals",
    "OwnerCheck",
    "PairOutcome",
    "PostJudgement",
    "PostOutcome",
    "QueryRanker",
    "QuotaExceeded",
    "QuotaOverrides",
    "RetentionConfig",
    "RetentionService",
    "Revocation",
    "Role",
    "RunFrames",
    "RunMeter",
    "RunOptions",
    "RunRecord",
    "RunSpec",
    "RunStatus",
    "RunTracing",
    "RunUsage",
    "RunsError",
    "RunsService",
    "ScopedStore",
    "SigningSecrets",
    "Stopped",
    "StreamModeName",
    "SweepReport",
    "ThreadRecord",
    "ThreadStatus",
    "ThreadTTL",
    "ThreadsService",
    "TtlStrategy",
    "Unavailable",
    "UsageReading",
    "UsageReport",
    "UsageService",
    "UsageTotals",
    "WebhookSecrets",
    "WebhooksService",
    "build_assistants",
    "check_quotas",
    "check_schedule",
    "check_timezone",
    "dumps",
    "follow_frames",
    "graph_mode",
    "is_key_secret",
    "item_text",
    "limits_from_settings",
    "loads",
    "open_engine",
    "open_keys",
    "owner_id_for",
    "query_database_file",
    "registry",
    "request_scope",
    "to_jsonable",
    "trace_headers",
    "upgrade_schema",
    "utc_now",
]
