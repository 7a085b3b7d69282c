"""The one opener of the engine: backend, services, executor, workers and schedulers.

`open_engine(settings, …)` is the only place that composes the run engine, for every
process that runs one: `atelier serve` (both stores), `atelier worker` and
`atelier run` (`role`). It opens the backend `settings` name (embedded SQLite in
DATA_DIR, or PostgreSQL and Redis), then the caller's runtime context on the
backend's pools (`context`), builds the assistants, the services and the executor
(with each owner's limits: the `QUOTA_*` settings under the key's overrides),
recovers what a previous process left, and runs what the role runs: the webhook
deliverer, the scale-out workers, the cron scheduler and the campaigns' driver,
the retention sweep, the schedulers that advance experiments and judge sampled live
runs. What the product brings (its assistants, its context, the Store's ranking, its
tracing callbacks, the errors whose messages users may read, the API keys' webhook
signing secrets, its evaluation and campaign hooks) comes in as arguments. See
docs/architecture.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackHandler

from core.settings import Settings
from engine.assistants import AssistantFactory, with_store
from engine.audit import AuditRepository
from engine.campaigns import CampaignHooks
from engine.crons import CRON_POLL, utc_now
from engine.experiments import NO_EVALUATION, EvaluationHooks
from engine.feedback import FeedbackRepository
from engine.keys import KeyRepository
from engine.protocols import DatabasePools, ExecutorSetup, RunBackend, RunMetrics
from engine.quotas import limits_from_settings, limits_with_overrides
from engine.repositories import (
    AssistantRepository,
    CampaignRepository,
    CronRepository,
    DatasetRepository,
    ExperimentRepository,
    OnlineEvaluationRepository,
)
from engine.retention import RetentionConfig, RetentionRepository
from engine.services import (
    AssistantsService,
    CampaignsService,
    CronsService,
    DatasetsService,
    EngineCore,
    ExperimentsService,
    FeedbackService,
    OnlineEvaluationService,
    RetentionService,
    RunsService,
    ThreadsService,
    WebhooksService,
)
from engine.services.core import RECOVERY_INTERVAL
from engine.services.keys import AuditService, KeysService
from engine.services.usage import UsageService
from engine.sqlite.backend import open_sqlite_backend
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.keys import SqliteAuditRepository, SqliteKeyRepository
from engine.store import QueryRanker, ScopedStore, query_ranker
from engine.tracing import RunTracing
from engine.usage import RunMeter
from engine.webhook_signing import WebhookSecrets
from engine.webhooks import WebhookConfig

#: What a process runs the engine for: the HTTP API (with its workers, scale-out), a
#: worker of the shared queue, or one request from the command line.
Role = Literal["serve", "worker", "run"]
#: Opens the runtime context runs get (`context=`), given the backend's database pools
#: (None: embedded), for as long as the engine is open.
ContextOpener = Callable[[DatabasePools | None], AbstractAsyncContextManager[Any]]
#: Returns an owner's quota overrides (quota name → limit, None: unlimited; empty: none).
QuotaOverrides = Callable[[str], Awaitable[Mapping[str, Any]]]
#: Builds the product's campaign hooks, given the runtime context `context` opened.
CampaignHooksFactory = Callable[[Any], CampaignHooks]


@dataclass
class Engine:
    """An open engine: a service per resource, and what the process reports about it."""

    runs: RunsService
    threads: ThreadsService
    assistants: AssistantsService
    crons: CronsService
    campaigns: CampaignsService
    feedback: FeedbackService
    webhooks: WebhooksService
    #: Managed API keys, and who may still act.
    keys: KeysService
    #: The audit trail.
    audit: AuditService
    #: Each owner's usage this month and its quotas.
    usage: UsageService
    #: The retention sweep (thread TTLs, ended webhook deliveries, old event logs).
    retention: RetentionService
    datasets: DatasetsService
    experiments: ExperimentsService
    evaluation: OnlineEvaluationService
    #: LangGraph's store, scoped per API key (routes bind it to the caller).
    store: ScopedStore
    #: The runtime context the caller's `context` opened.
    context: Any
    #: The ids of the graphs served.
    graphs: list[str]
    #: Readiness checks by name (each raises when its server fails).
    ready_checks: dict[str, Callable[[], Awaitable[None]]]
    #: Reads how many runs wait in a shared queue (None: there is none).
    queue_depth: Callable[[], Awaitable[int]] | None
    #: The workers this process runs (scale-out).
    workers: Sequence[object]
    #: The shared parts beneath the services (for the engine's own tests and checks).
    core: EngineCore


@contextlib.asynccontextmanager
async def open_engine(
    settings: Settings,
    *,
    assistants: AssistantFactory,
    context: ContextOpener,
    ranker: QueryRanker,
    role: Role = "serve",
    metrics: RunMetrics | Any = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
    tracing: RunTracing | None = None,
    public_errors: tuple[type[BaseException], ...] = (),
    concurrency: int | None = None,
    clock: Callable[[], datetime] = utc_now,
    backend: AbstractAsyncContextManager[RunBackend] | None = None,
    recovery_interval: float = RECOVERY_INTERVAL,
    meter: RunMeter | None = None,
    quota_overrides: QuotaOverrides | None = None,
    webhook_secrets: WebhookSecrets | None = None,
    evaluation: EvaluationHooks | None = None,
    campaigns: CampaignHooksFactory | None = None,
) -> AsyncIterator[Engine]:
    """Open the engine for the block; stop its runs (for the next start) and close it after.

    Args:
        settings: The deployment's settings (DATA_DIR, or DATABASE_URL and REDIS_URL;
            the run limits; webhooks; CRON_SCHEDULER; retention).
        assistants: Builds the served assistants on the backend's checkpointer.
        context: Opens the runtime context of runs on the backend's pools.
        ranker: Ranks a Store search's items for its query without EMBEDDINGS_BASE_URL.
        role: `serve` (the API; scale-out: its RUN_WORKERS workers), `worker` (one
            worker of the shared queue, DATABASE_URL only) or `run` (`atelier run`:
            always the embedded engine on DATA_DIR, no cron).
        metrics: Told about runs, webhooks, Redis fallbacks and the workers' claims.
        callbacks: LangChain callbacks every run's config carries.
        tracing: Traces runs (`engine.tracing`); None: they are not traced.
        public_errors: Errors whose messages a failed run's `error` frame may show.
        concurrency: A worker's runs at once (default RUN_WORKER_CONCURRENCY).
        clock: The clock of the crons, the campaigns and the retention sweep (tests move it on
            instead of waiting).
        backend: The backend to open instead of the one `settings` name (tests give
            one with short timeouts).
        recovery_interval: Seconds between recovery sweeps (embedded).
        meter: Measures each run's LLM usage and cost, recorded when it ends
            (`engine.usage`); None: runs' usage is unknown.
        quota_overrides: Returns an owner's quota overrides (its key's `quotas`) to
            put over the `QUOTA_*` settings (`engine.quotas`); None: the managed keys'
            own `quotas` (`KeysService.quotas_of`).
        webhook_secrets: Each API key's webhook signing secrets
            (`engine.webhook_signing`); None: the managed keys' own (`KeysService`),
            WEBHOOK_SECRET for the others.
        evaluation: The product's side of datasets, experiments and online evaluation
            (None: datasets hold any input, and nothing is run or judged).
        campaigns: Builds the product's campaign hooks from the opened context (None:
            this engine plans and writes no campaign; `engine.campaigns`).

    Raises:
        DataDirInUse: Embedded, another process owns DATA_DIR; nothing was opened.
        ValueError: `worker` without DATABASE_URL.
    """
    async with contextlib.AsyncExitStack() as stack:
        parts = await stack.enter_async_context(backend or _backend(settings, role, metrics))
        opened = await stack.enter_async_context(context(parts.pools))
        repositories = _repositories(parts)
        keys = keys_service(settings, repositories.keys, repositories.audit)
        # A managed key's `quotas` over the QUOTA_* settings, unless the caller says otherwise.
        limits = limits_with_overrides(
            limits_from_settings(settings), quota_overrides or keys.quotas_of
        )
        store = ScopedStore(
            parts.store,
            query_ranker(settings, ranker),
            quotas=parts.quotas,
            limits=limits,
            reader=parts.store_reader,
        )
        stack.push_async_callback(store.close)
        graphs = with_store(assistants(parts.checkpointer), store)
        setup = ExecutorSetup(
            assistants=graphs,
            context=opened,
            run_timeout=settings.run_timeout,
            metrics=metrics,
            callbacks=callbacks,
            # A managed key's own webhook secrets, unless the caller brings others.
            # A revoked or expired key's runs send nothing.
            webhooks=replace(
                WebhookConfig.from_settings(settings),
                secrets=webhook_secrets or keys,
                recipients=keys,
            ),
            tracing=tracing,
            public_errors=public_errors,
            meter=meter,
        )
        retention_config = RetentionConfig.from_settings(settings)
        core = EngineCore(
            backend=parts,
            setup=setup,
            created=repositories.assistants,
            max_attempts=settings.run_max_attempts,
            event_retention_hours=settings.event_retention_hours if role != "worker" else 0,
            recovery_interval=recovery_interval,
            limits=limits,
            default_ttl=retention_config.default_ttl,
        )
        runs = RunsService(core)
        threads = ThreadsService(core)
        crons = CronsService(core, repositories.crons, interval=CRON_POLL, clock=clock, owners=keys)
        retention = RetentionService(
            core, threads, repositories.retention, retention_config, clock=clock
        )
        campaign_hooks = campaigns(opened) if campaigns is not None else None
        campaign_service = CampaignsService(
            core,
            repositories.campaigns,
            runs,
            campaign_hooks,
            clock=clock,
            interval=CRON_POLL,
            owners=keys,
        )
        fires_crons = settings.cron_scheduler and role != "run"
        if role == "worker":
            workers = await stack.enter_async_context(
                parts.workers(setup, count=1, concurrency=concurrency)
            )
            await stack.enter_async_context(core)
        else:
            await stack.enter_async_context(core)
            workers = await stack.enter_async_context(parts.workers(setup))
        if role != "run":  # stopped before the core: no thread is swept while it stops
            retention.start()
            stack.push_async_callback(retention.stop)
        if fires_crons:  # stopped first: no tick fires while the rest stops
            crons.start()
            stack.push_async_callback(crons.stop)
            campaign_service.start_driver()
            stack.push_async_callback(campaign_service.stop_driver)
        hooks = evaluation or NO_EVALUATION
        # What a revoked or expired key made stops acting, as its crons do.
        experiments = ExperimentsService(
            core, runs, repositories.experiments, repositories.datasets, hooks, owners=keys
        )
        online = OnlineEvaluationService(core, runs, repositories.evaluations, hooks, owners=keys)
        if role != "run" and evaluation is not None:  # `atelier eval` drives its own
            for scheduler in (experiments, online):
                scheduler.start()
                stack.push_async_callback(scheduler.stop)
        yield Engine(
            runs=runs,
            threads=threads,
            assistants=AssistantsService(core),
            crons=crons,
            campaigns=campaign_service,
            feedback=FeedbackService(core, repositories.feedback, runs),
            webhooks=WebhooksService(parts.storage.deliveries, parts.storage.runs),
            keys=keys,
            audit=AuditService(repositories.audit),
            usage=UsageService(core, parts.quotas),
            retention=retention,
            datasets=DatasetsService(core, repositories.datasets, hooks),
            experiments=experiments,
            evaluation=online,
            store=store,
            context=opened,
            graphs=sorted(core.builtins),
            ready_checks=dict(parts.ready_checks),
            queue_depth=parts.queue_depth,
            workers=workers,
            core=core,
        )


@dataclass(frozen=True)
class _Repositories:
    """The repositories of the resources beside threads and runs, on one backend."""

    crons: CronRepository
    feedback: FeedbackRepository
    assistants: AssistantRepository
    keys: KeyRepository
    audit: AuditRepository
    retention: RetentionRepository
    datasets: DatasetRepository
    experiments: ExperimentRepository
    evaluations: OnlineEvaluationRepository
    campaigns: CampaignRepository


def _repositories(parts: RunBackend) -> _Repositories:
    """Build each resource's repository, the implementation of the backend's kind.

    A new resource adds its two implementations here (and its service above).
    """
    if parts.kind == "sqlite":
        from engine.sqlite.assistants import SqliteAssistantRepository
        from engine.sqlite.campaigns import SqliteCampaignRepository
        from engine.sqlite.crons import SqliteCronRepository
        from engine.sqlite.datasets import SqliteDatasetRepository
        from engine.sqlite.evaluation import SqliteOnlineEvaluationRepository
        from engine.sqlite.experiments import SqliteExperimentRepository
        from engine.sqlite.feedback import SqliteFeedbackRepository
        from engine.sqlite.retention import SqliteRetention

        return _Repositories(
            crons=SqliteCronRepository(parts.database),
            feedback=SqliteFeedbackRepository(parts.database),
            assistants=SqliteAssistantRepository(parts.database),
            keys=SqliteKeyRepository(parts.database),
            audit=SqliteAuditRepository(parts.database),
            retention=SqliteRetention(parts.database),
            datasets=SqliteDatasetRepository(parts.database),
            experiments=SqliteExperimentRepository(parts.database),
            evaluations=SqliteOnlineEvaluationRepository(parts.database),
            campaigns=SqliteCampaignRepository(parts.database),
        )
    from engine.postgres.assistants import PostgresAssistantRepository  # the scale-out extra
    from engine.postgres.campaigns import PostgresCampaignRepository
    from engine.postgres.crons import PostgresCronRepository
    from engine.postgres.datasets import PostgresDatasetRepository
    from engine.postgres.evaluation import PostgresOnlineEvaluationRepository
    from engine.postgres.experiments import PostgresExperimentRepository
    from engine.postgres.feedback import PostgresFeedbackRepository
    from engine.postgres.keys import PostgresAuditRepository, PostgresKeyRepository
    from engine.postgres.retention import PostgresRetention

    return _Repositories(
        crons=PostgresCronRepository(parts.database),
        feedback=PostgresFeedbackRepository(parts.database),
        assistants=PostgresAssistantRepository(parts.database),
        keys=PostgresKeyRepository(parts.database),
        audit=PostgresAuditRepository(parts.database),
        retention=PostgresRetention(parts.database),
        datasets=PostgresDatasetRepository(parts.database),
        experiments=PostgresExperimentRepository(parts.database),
        evaluations=PostgresOnlineEvaluationRepository(parts.database),
        campaigns=PostgresCampaignRepository(parts.database),
    )


def keys_service(settings: Settings, keys: KeyRepository, audit: AuditRepository) -> KeysService:
    """Return the keys service of a deployment's settings over its key storage."""
    return KeysService(
        keys,
        audit,
        bootstrap=settings.auth_api_keys,
        overlap_hours=settings.webhook_secret_overlap_hours,
    )


@contextlib.asynccontextmanager
async def open_keys(settings: Settings) -> AsyncIterator[KeysService]:
    """Open the deployment's keys alone, for the block (`atelier keys`).

    Embedded, on `DATA_DIR/atelier.db` without owning DATA_DIR (a running server
    keeps it; SQLite serialises the writes); scale-out, on DATABASE_URL, its schema
    brought up to date first. A server sees a change within `CACHE_SECONDS`.

    Raises:
        ImportError: DATABASE_URL is set and the scale-out extra is not installed.
    """
    if settings.database_url is not None:
        from engine.postgres.keys import PostgresAuditRepository, PostgresKeyRepository
        from engine.postgres.migrations import upgrade
        from engine.postgres.pool import open_pool

        pool = await open_pool(
            settings.database_url.get_secret_value(), min_size=1, max_size=2, name="atelier-keys"
        )
        try:
            await upgrade(pool)
            yield keys_service(settings, PostgresKeyRepository(pool), PostgresAuditRepository(pool))
        finally:
            await pool.close()
        return
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = await SqliteDatabase(str(settings.database_path)).open()
    try:
        yield keys_service(settings, SqliteKeyRepository(database), SqliteAuditRepository(database))
    finally:
        await database.close()


def _backend(
    settings: Settings, role: Role, metrics: Any
) -> AbstractAsyncContextManager[RunBackend]:
    """Return the backend `settings` name for `role` (unopened)."""
    if settings.database_url is not None and role != "run":
        from engine.postgres.backend import open_postgres_backend  # the scale-out extra

        return open_postgres_backend(settings, metrics=metrics, serves_streams=role != "worker")
    if role == "worker":
        raise ValueError("atelier worker needs DATABASE_URL (the shared queue)")
    return open_sqlite_backend(settings, owner=f"atelier {role}")


__all__ = [
    "CampaignHooksFactory",
    "ContextOpener",
    "Engine",
    "QuotaOverrides",
    "Role",
    "keys_service",
    "open_engine",
    "open_keys",
]
