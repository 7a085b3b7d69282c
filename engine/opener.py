"""The one opener of the engine: backend, services, executor, workers and schedulers.

`open_engine(settings, …)` is the only place that composes the run engine, for every
process that runs one: `atelier serve` (both stores), `atelier worker` and
`atelier run` (`role`). It opens the backend `settings` name (embedded SQLite in
DATA_DIR, or PostgreSQL and Redis), then the caller's runtime context on the
backend's pools (`context`), builds the assistants, the services and the executor,
recovers what a previous process left, and runs what the role runs: the webhook
deliverer, the scale-out workers, the cron scheduler and the campaigns' driver. What
the product brings (its assistants, its context, the Store's ranking, its tracing
callbacks, the errors whose messages users may read, its campaign hooks) comes in as
arguments. See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackHandler

from core.settings import Settings
from engine.assistants import AssistantFactory, with_store
from engine.campaigns import CampaignHooks
from engine.crons import CRON_POLL, utc_now
from engine.protocols import DatabasePools, ExecutorSetup, RunBackend, RunMetrics
from engine.services import (
    AssistantsService,
    CampaignsService,
    CronsService,
    EngineCore,
    FeedbackService,
    RunsService,
    ThreadsService,
    WebhooksService,
)
from engine.services.core import RECOVERY_INTERVAL
from engine.sqlite.backend import open_sqlite_backend
from engine.store import QueryRanker, ScopedStore, query_ranker
from engine.tracing import RunTracing
from engine.webhooks import WebhookConfig

#: What a process runs the engine for: the HTTP API (with its workers, scale-out), a
#: worker of the shared queue, or one request from the command line.
Role = Literal["serve", "worker", "run"]
#: Opens the runtime context runs get (`context=`), given the backend's database pools
#: (None: embedded), for as long as the engine is open.
ContextOpener = Callable[[DatabasePools | None], AbstractAsyncContextManager[Any]]
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
    campaigns: CampaignHooksFactory | None = None,
) -> AsyncIterator[Engine]:
    """Open the engine for the block; stop its runs (for the next start) and close it after.

    Args:
        settings: The deployment's settings (DATA_DIR, or DATABASE_URL and REDIS_URL;
            the run limits; webhooks; CRON_SCHEDULER).
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
        clock: The crons' and campaigns' clock (tests move it on instead of waiting).
        backend: The backend to open instead of the one `settings` name (tests give
            one with short timeouts).
        recovery_interval: Seconds between recovery sweeps (embedded).
        campaigns: Builds the product's campaign hooks from the opened context (None:
            this engine plans and writes no campaign; `engine.campaigns`).

    Raises:
        DataDirInUse: Embedded, another process owns DATA_DIR; nothing was opened.
        ValueError: `worker` without DATABASE_URL.
    """
    async with contextlib.AsyncExitStack() as stack:
        parts = await stack.enter_async_context(backend or _backend(settings, role, metrics))
        opened = await stack.enter_async_context(context(parts.pools))
        store = ScopedStore(parts.store, query_ranker(settings, ranker))
        graphs = with_store(assistants(parts.checkpointer), store)
        setup = ExecutorSetup(
            assistants=graphs,
            context=opened,
            run_timeout=settings.run_timeout,
            metrics=metrics,
            callbacks=callbacks,
            webhooks=WebhookConfig.from_settings(settings),
            tracing=tracing,
            public_errors=public_errors,
        )
        core = EngineCore(
            backend=parts,
            setup=setup,
            max_attempts=settings.run_max_attempts,
            event_retention_hours=settings.event_retention_hours if role != "worker" else 0,
            recovery_interval=recovery_interval,
        )
        runs = RunsService(core)
        crons = CronsService(core, parts.crons, interval=CRON_POLL, clock=clock)
        hooks = campaigns(opened) if campaigns is not None else None
        campaign_service = CampaignsService(
            core, parts.campaigns, runs, hooks, clock=clock, interval=CRON_POLL
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
        if fires_crons:  # stopped first: no tick fires while the rest stops
            crons.start()
            stack.push_async_callback(crons.stop)
            campaign_service.start_driver()
            stack.push_async_callback(campaign_service.stop_driver)
        yield Engine(
            runs=runs,
            threads=ThreadsService(core),
            assistants=AssistantsService(core),
            crons=crons,
            campaigns=campaign_service,
            feedback=FeedbackService(core, parts.feedback, runs),
            webhooks=WebhooksService(parts.storage.deliveries, parts.storage.runs),
            store=store,
            context=opened,
            graphs=sorted(graphs),
            ready_checks=dict(parts.ready_checks),
            queue_depth=parts.queue_depth,
            workers=workers,
            core=core,
        )


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


__all__ = ["CampaignHooksFactory", "ContextOpener", "Engine", "Role", "open_engine"]
