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
from engine.online_evaluation import JUDGE_KEY, QUALITY_KEY, EvaluationSetting
from engine.opener import ContextOpener, Engine, Role, open_engine
from engine.protocols import DatabasePools, RunFrames
from engine.records import (
    RUN_STATUSES,
    CancelAction,
    Frame,
    RunRecord,
    RunStatus,
    ThreadRecord,
    ThreadStatus,
)
from engine.request_scope import request_scope
from engine.serde import dumps, loads, to_jsonable
from engine.services import (
    AssistantsService,
    CronsService,
    DatasetsService,
    ExperimentsService,
    FeedbackService,
    OnlineEvaluationService,
    RunsService,
    ThreadsService,
    WebhooksService,
)
from engine.spec import IfNotExists, MultitaskStrategy, RunOptions, RunSpec
from engine.sqlite.database import query_database_file
from engine.sqlite.ownership import DataDirInUse
from engine.store import EmbeddingsUnavailable, QueryRanker, ScopedStore, item_text
from engine.tracing import GraphSpans, RunTracing, trace_headers
from engine.webhooks import ATTEMPT_OUTCOMES, DELIVERY_OUTCOMES, OutboxTotals


async def upgrade_schema(database_url: str) -> int:
    """Apply the PostgreSQL schema migrations `database_url` lacks; return its version.

    Raises:
        ImportError: The scale-out extra (psycopg) is not installed.
    """
    from engine.postgres.migrations import upgrade_url  # the scale-out extra

    return await upgrade_url(database_url)


__all__ = [
    "ATTEMPT_OUTCOMES",
    "CONTROL_EVENTS",
    "DATABASE_UNAVAILABLE",
    "DEFAULT_CONCURRENCY",
    "DELIVERY_OUTCOMES",
    "EXPERIMENT_STATUSES",
    "FEEDBACK_KEY_PATTERN",
    "IDLE",
    "JUDGE_KEY",
    "MAX_ARMS",
    "MAX_COMMENT_CHARS",
    "MAX_CONCURRENCY",
    "MAX_DATASETS_PER_OWNER",
    "MAX_DESCRIPTION_CHARS",
    "MAX_EXAMPLES_PER_DATASET",
    "MAX_EXAMPLES_PER_REQUEST",
    "MAX_FEEDBACK_PER_RUN",
    "MAX_NAME_CHARS",
    "MAX_REPETITIONS",
    "MAX_SCORE",
    "MAX_THREADS_PER_REQUEST",
    "MIN_ARMS",
    "QUALITY_KEY",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "STREAM_MODES",
    "UNSUPPORTED_STREAM_MODES",
    "Arm",
    "Assistant",
    "AssistantFactory",
    "AssistantRecord",
    "AssistantSpec",
    "AssistantsService",
    "CancelAction",
    "Conflict",
    "ContextOpener",
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
    "MultitaskStrategy",
    "NotFound",
    "NotReadyError",
    "OnRunCompleted",
    "OnlineEvaluationService",
    "OutboxTotals",
    "PairOutcome",
    "PostJudgement",
    "PostOutcome",
    "QueryRanker",
    "Role",
    "RunFrames",
    "RunOptions",
    "RunRecord",
    "RunSpec",
    "RunStatus",
    "RunTracing",
    "RunsError",
    "RunsService",
    "ScopedStore",
    "Stopped",
    "StreamModeName",
    "ThreadRecord",
    "ThreadStatus",
    "ThreadsService",
    "Unavailable",
    "WebhooksService",
    "build_assistants",
    "check_schedule",
    "check_timezone",
    "dumps",
    "follow_frames",
    "graph_mode",
    "item_text",
    "loads",
    "open_engine",
    "query_database_file",
    "registry",
    "request_scope",
    "to_jsonable",
    "trace_headers",
    "upgrade_schema",
    "utc_now",
]
