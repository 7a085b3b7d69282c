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
from engine.campaigns import (
    CAMPAIGN_STATUSES,
    ITEM_STATUSES,
    MAX_ITEMS,
    POST_FIELDS,
    PUBLICATION_STATUSES,
    CampaignHooks,
    CampaignItem,
    CampaignRecord,
    CampaignStatus,
    ItemStatus,
    Publication,
    PublicationStatus,
)
from engine.crons import CronRecord, OnRunCompleted, check_schedule, check_timezone, utc_now
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
from engine.opener import CampaignHooksFactory, ContextOpener, Engine, Role, open_engine
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
    CampaignsService,
    CronsService,
    FeedbackService,
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
    "CAMPAIGN_STATUSES",
    "CONTROL_EVENTS",
    "DATABASE_UNAVAILABLE",
    "DELIVERY_OUTCOMES",
    "FEEDBACK_KEY_PATTERN",
    "IDLE",
    "ITEM_STATUSES",
    "MAX_COMMENT_CHARS",
    "MAX_FEEDBACK_PER_RUN",
    "MAX_ITEMS",
    "MAX_SCORE",
    "POST_FIELDS",
    "PUBLICATION_STATUSES",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "STREAM_MODES",
    "UNSUPPORTED_STREAM_MODES",
    "Assistant",
    "AssistantFactory",
    "AssistantRecord",
    "AssistantSpec",
    "AssistantsService",
    "CampaignHooks",
    "CampaignHooksFactory",
    "CampaignItem",
    "CampaignRecord",
    "CampaignStatus",
    "CampaignsService",
    "CancelAction",
    "Conflict",
    "ContextOpener",
    "CronRecord",
    "CronsService",
    "DataDirInUse",
    "DatabasePools",
    "EmbeddingsUnavailable",
    "Engine",
    "FeedbackRecord",
    "FeedbackService",
    "Frame",
    "GraphSpans",
    "Idle",
    "IfExists",
    "IfNotExists",
    "Invalid",
    "InvalidFields",
    "ItemStatus",
    "MultitaskStrategy",
    "NotFound",
    "NotReadyError",
    "OnRunCompleted",
    "OutboxTotals",
    "Publication",
    "PublicationStatus",
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
