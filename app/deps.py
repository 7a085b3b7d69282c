"""Annotated dependency aliases: the one way routes (and the MCP and A2A servers) reach services.

The caller is `CallerDep` (its owner id, role and quotas) and its owner id alone
`PrincipalDep`, both authenticated by `app.security`. The
engine's services and the product's are opened once in the app's lifespan
(`app.main`, `app.composition.open_product`) and kept on `app.state`; this module is
the only reader of `app.state` for routes, so a test can build an app with other
services and every route follows. A getter takes the request (the MCP and A2A
servers, which FastAPI does not call, pass theirs).

    RunsDep        RunsService         runs: create, read, cancel, wait, follow
    ThreadsDep     ThreadsService      threads, their state and history
    AssistantsDep  AssistantsService   built-in and created assistants, versions
    CronsDep       CronsService        crons
    CampaignsDep   CampaignsService    campaigns: plan, review, publications
    FeedbackDep    FeedbackService     feedback on runs
    WebhooksDep    WebhooksService     a run's webhook deliveries, the outbox's totals
    UsageDep       UsageService        a key's usage this month and its quotas
    DatasetsDep    DatasetsService     datasets and their examples
    ExperimentsDep ExperimentsService  experiments: create, read, follow, cancel
    EvaluationDep  OnlineEvaluationService  sampling rates on assistants, their report
    StoreDep       ScopedStore         the Store (LangGraph's), scoped per API key
    KeysDep        KeysService         managed API keys
    AuditDep       AuditService        the audit trail
    NotesDep, AssetsDep, ContextDep    the product's vault, assets, runtime context
    SettingsDep, AssetLinksDep, ReadyChecksDep, GraphsDep, QueueDepthDep
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated

from fastapi import Depends, Request, Security

from agentkit.context import AtelierContext
from app.security import Caller, get_caller, get_principal
from core.settings import Settings
from engine import (
    AssistantsService,
    AuditService,
    CampaignsService,
    CronsService,
    DatasetsService,
    Engine,
    ExperimentsService,
    FeedbackService,
    KeysService,
    OnlineEvaluationService,
    RunsService,
    ScopedStore,
    ThreadsService,
    UsageService,
    WebhooksService,
)
from knowledge.repository import NoteRepository
from providers.asset_links import AssetLinks
from providers.assets import AssetStore

#: A readiness check: raises when what it checks cannot serve.
ReadyCheck = Callable[[], Awaitable[None]]


def get_settings(request: Request) -> Settings:
    """Return the app's settings."""
    return request.app.state.settings


def get_notes(request: Request) -> NoteRepository:
    """Return the knowledge vault."""
    return request.app.state.notes


def get_optional_notes(request: Request) -> NoteRepository | None:
    """Return the knowledge vault, or None before the lifespan opened it."""
    return getattr(request.app.state, "notes", None)


def get_assets(request: Request) -> AssetStore:
    """Return the asset store."""
    return request.app.state.assets


def get_context(request: Request) -> AtelierContext:
    """Return the graph runtime context."""
    return request.app.state.context


def get_asset_links(request: Request) -> AssetLinks | None:
    """Return the signer of asset links (None when the service runs open)."""
    return getattr(request.app.state, "asset_links", None)


def get_ready_checks(request: Request) -> Mapping[str, ReadyCheck]:
    """Return the readiness checks registered by name (none before the lifespan ran)."""
    return getattr(request.app.state, "ready_checks", {})


def get_graphs(request: Request) -> list[str]:
    """Return the ids of the graphs served (none before the lifespan ran)."""
    return sorted(getattr(request.app.state, "graphs", None) or ())


def get_queue_depth(request: Request) -> Callable[[], Awaitable[int]] | None:
    """Return what reads the shared queue's depth (None: embedded, no queue)."""
    return getattr(request.app.state, "queue_depth", None)


def get_engine(request: Request) -> Engine:
    """Return the open engine."""
    engine: Engine = request.app.state.engine
    return engine


def get_optional_engine(request: Request) -> Engine | None:
    """Return the open engine, or None before the lifespan opened it."""
    return getattr(request.app.state, "engine", None)


def get_runs(request: Request) -> RunsService:
    """Return the runs service."""
    return get_engine(request).runs


def get_threads(request: Request) -> ThreadsService:
    """Return the threads service."""
    return get_engine(request).threads


def get_assistants(request: Request) -> AssistantsService:
    """Return the assistants service."""
    return get_engine(request).assistants


def get_crons(request: Request) -> CronsService:
    """Return the crons service."""
    return get_engine(request).crons


def get_campaigns(request: Request) -> CampaignsService:
    """Return the campaigns service."""
    return get_engine(request).campaigns


def get_feedback(request: Request) -> FeedbackService:
    """Return the feedback service."""
    return get_engine(request).feedback


def get_webhooks(request: Request) -> WebhooksService:
    """Return the webhook read side."""
    return get_engine(request).webhooks


def get_keys(request: Request) -> KeysService:
    """Return the managed keys."""
    return get_engine(request).keys


def get_audit(request: Request) -> AuditService:
    """Return the audit trail."""
    return get_engine(request).audit


def get_usage(request: Request) -> UsageService:
    """Return the usage service."""
    return get_engine(request).usage


def get_datasets(request: Request) -> DatasetsService:
    """Return the datasets service."""
    return get_engine(request).datasets


def get_experiments(request: Request) -> ExperimentsService:
    """Return the experiments service."""
    return get_engine(request).experiments


def get_evaluation(request: Request) -> OnlineEvaluationService:
    """Return the online evaluation service."""
    return get_engine(request).evaluation


def get_store(request: Request) -> ScopedStore:
    """Return the Store, scoped per API key (bind it to the caller with `for_owner`)."""
    return get_engine(request).store


SettingsDep = Annotated[Settings, Depends(get_settings)]
NotesDep = Annotated[NoteRepository, Depends(get_notes)]
OptionalNotesDep = Annotated[NoteRepository | None, Depends(get_optional_notes)]
AssetsDep = Annotated[AssetStore, Depends(get_assets)]
ContextDep = Annotated[AtelierContext, Depends(get_context)]
AssetLinksDep = Annotated[AssetLinks | None, Depends(get_asset_links)]
ReadyChecksDep = Annotated[Mapping[str, ReadyCheck], Depends(get_ready_checks)]
GraphsDep = Annotated[list[str], Depends(get_graphs)]
QueueDepthDep = Annotated[Callable[[], Awaitable[int]] | None, Depends(get_queue_depth)]
OptionalEngineDep = Annotated[Engine | None, Depends(get_optional_engine)]
RunsDep = Annotated[RunsService, Depends(get_runs)]
ThreadsDep = Annotated[ThreadsService, Depends(get_threads)]
AssistantsDep = Annotated[AssistantsService, Depends(get_assistants)]
CronsDep = Annotated[CronsService, Depends(get_crons)]
CampaignsDep = Annotated[CampaignsService, Depends(get_campaigns)]
FeedbackDep = Annotated[FeedbackService, Depends(get_feedback)]
WebhooksDep = Annotated[WebhooksService, Depends(get_webhooks)]
StoreDep = Annotated[ScopedStore, Depends(get_store)]
KeysDep = Annotated[KeysService, Depends(get_keys)]
AuditDep = Annotated[AuditService, Depends(get_audit)]

CallerDep = Annotated[Caller, Security(get_caller)]
"""The caller: owner id, role (`admin`, `member`, `read-only`), kind and quota overrides."""
UsageDep = Annotated[UsageService, Depends(get_usage)]
DatasetsDep = Annotated[DatasetsService, Depends(get_datasets)]
ExperimentsDep = Annotated[ExperimentsService, Depends(get_experiments)]
EvaluationDep = Annotated[OnlineEvaluationService, Depends(get_evaluation)]

PrincipalDep = Annotated[str, Security(get_principal)]
"""The caller's owner id: `key_<24 hex>` per API key, or `anonymous` when open."""

__all__ = [
    "AssetLinksDep",
    "AssetsDep",
    "AssistantsDep",
    "AuditDep",
    "CallerDep",
    "CampaignsDep",
    "ContextDep",
    "CronsDep",
    "DatasetsDep",
    "EvaluationDep",
    "ExperimentsDep",
    "FeedbackDep",
    "GraphsDep",
    "KeysDep",
    "NotesDep",
    "OptionalEngineDep",
    "OptionalNotesDep",
    "PrincipalDep",
    "QueueDepthDep",
    "ReadyChecksDep",
    "RunsDep",
    "SettingsDep",
    "StoreDep",
    "ThreadsDep",
    "UsageDep",
    "WebhooksDep",
    "get_assistants",
    "get_audit",
    "get_keys",
    "get_runs",
    "get_settings",
    "get_threads",
]
