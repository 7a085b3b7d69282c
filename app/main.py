"""The ASGI application: `create_app(settings)` and the module-level `app`.

Async resources (database connections, the checkpointer, the run manager, the
embedded model) are opened in the lifespan, never at import: importing this
module only reads settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from agentkit.services import open_services
from app import a2a, names
from app.errors import install_error_handlers
from app.mcp import mcp_router
from app.metrics import install_metrics
from app.openapi import install_openapi
from app.request_scope import RequestScopeMiddleware
from app.routes import (
    assets,
    assistants,
    crons,
    exports,
    feedback,
    knowledge,
    ops,
    runs,
    store,
    threads,
)
from app.routes.ops import NotReadyError
from app.security import announce_auth_mode, install_security
from core.settings import Settings
from engine.assistants import AssistantFactory, registry, with_store
from engine.crons import CRON_POLL
from engine.manager import RunManager
from engine.protocols import ExecutorSetup, RunBackend
from engine.sqlite.backend import open_sqlite_backend
from engine.store import ScopedStore, query_ranker
from engine.tracing import open_run_tracing
from engine.webhooks import WebhookConfig
from graphs.assistants import ASSISTANTS
from providers.fonts import web_cjk_font

VERSION = "0.1.0"
STATIC_DIR = Path(__file__).parent / "static"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the service's resources for the app's lifetime and close them after.

    The run backend first, then the studio's services (its notes and assets where the
    backend keeps them), then the run manager with the executor the backend gives.
    Embedded (no `DATABASE_URL`, `engine.sqlite.backend`): everything persistent lives
    in `DATA_DIR/atelier.db` (WAL): the knowledge notes, LangGraph's checkpoints
    (`AsyncSqliteSaver`), and the run store's threads, runs and event logs; runs execute
    in this process. Scale-out (`DATABASE_URL`): see `open_scale_out`. Without
    `LLM_BASE_URL` the embedded model is served for the app's lifetime
    (`providers.llm.open_model_factory`); if it cannot start or fails its self-test
    completion, start-up fails with its one-line reason, and once it crashed /ready
    reports the model check failed with that reason. With an OTLP endpoint set
    (README "Tracing") runs are traced (`engine.tracing`; `app.state.tracing`, None
    when off), and the spans left are flushed as the app stops.
    """
    settings: Settings = app.state.settings
    announce_auth_mode(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    metrics = app.state.metrics
    async with AsyncExitStack() as stack:
        # First in, last out: the spans of everything closed after are flushed too.
        app.state.tracing = tracing = stack.enter_context(open_run_tracing(settings))
        if settings.database_url is not None:
            backend: RunBackend = await open_scale_out(settings, stack, metrics)
        else:
            backend = await stack.enter_async_context(
                open_sqlite_backend(settings, owner="atelier serve")
            )
        context = await stack.enter_async_context(
            open_services(settings, notes=backend.notes, assets=backend.assets, observer=metrics)
        )
        app.state.notes = context.notes
        app.state.assets = context.assets
        app.state.context = context
        # The Store, scoped per API key: the routes bind it to the caller, runs to their owner.
        app.state.store = ScopedStore(backend.store, query_ranker(settings))
        graphs = with_store(app.state.assistant_factory(backend.checkpointer), app.state.store)
        app.state.graphs = sorted(graphs)
        setup = ExecutorSetup(
            assistants=graphs,
            context=context,
            run_timeout=settings.run_timeout,
            metrics=metrics,
            callbacks=[metrics.callback],
            webhooks=WebhookConfig.from_settings(settings),
            tracing=tracing,
        )
        manager = RunManager(
            backend=backend,
            setup=setup,
            max_attempts=settings.run_max_attempts,
            event_retention_hours=settings.event_retention_hours,
            cron_interval=CRON_POLL if settings.cron_scheduler else 0,  # fires due ticks
        )
        app.state.runs = await stack.enter_async_context(manager)
        await stack.enter_async_context(backend.workers(setup))
        app.state.ready_checks = {
            **getattr(app.state, "ready_checks", {}),
            **backend.ready_checks,
            "model": model_check(context.models),
        }
        if backend.queue_depth is not None:
            app.state.queue_depth = backend.queue_depth
        yield


def model_check(models: Any) -> Callable[[], Awaitable[None]]:
    """Return the readiness check of the model factory (the embedded model's health)."""

    async def model_serves() -> None:
        problem = models.health()
        if problem:
            raise NotReadyError(problem)

    return model_serves


async def open_scale_out(settings: Settings, stack: AsyncExitStack, metrics: Any) -> RunBackend:
    """Open the scale-out deployment's run backend on `stack` (README "Scale out").

    PostgreSQL holds the notes, assets, checkpoints, threads, runs and event logs
    (`engine.postgres.resources`); Redis (when `REDIS_URL` is set) carries live frames, wake-ups
    and cancels. The run manager records runs in the queue and leaves their execution
    to workers (`QueueExecutor`): RUN_WORKERS of them in this process (0: an API-only
    replica), each claiming up to RUN_WORKER_CONCURRENCY runs, and any number in
    `atelier worker` processes.
    """
    from engine.postgres.backend import open_postgres_backend  # the scale-out extra

    return await stack.enter_async_context(open_postgres_backend(settings, metrics=metrics))


def create_app(
    settings: Settings | None = None, *, assistant_factory: AssistantFactory | None = None
) -> FastAPI:
    """Build the Atelier ASGI app for `settings` (read from the environment when None).

    Args:
        settings: The configuration.
        assistant_factory: Builds the assistants served, given the checkpointer
            (default: the registry of `graphs.assistants.ASSISTANTS`); tests serve
            small graphs through it.
    """
    settings = settings or Settings()
    app = FastAPI(
        title="Atelier",
        version=VERSION,
        summary="Multi-agent content studio, served in the LangGraph Platform dialect.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.assistant_factory = assistant_factory or registry(ASSISTANTS)
    install_metrics(app)
    install_security(app, settings)
    install_error_handlers(app)
    app.add_middleware(RequestScopeMiddleware)  # requests fail fast while PostgreSQL is away
    app.include_router(ops.router)
    app.include_router(knowledge.router)
    app.include_router(assets.router)
    app.include_router(assistants.router)
    app.include_router(threads.router)
    app.include_router(exports.router)
    app.include_router(runs.router)
    app.include_router(crons.router)
    app.include_router(feedback.router)  # after crons: /runs/crons/… is not a run id
    app.include_router(store.router)
    app.include_router(a2a.router)  # A2A agents: /a2a/{assistant_id} (app/a2a.py)
    app.include_router(mcp_router(app))  # /mcp, its session manager in the lifespan
    install_openapi(app)
    mount_console(app)
    return app


def mount_console(app: FastAPI) -> None:
    """Serve the console page at `/` and its assets under `/console/` (no build step).

    `/console/names.js` carries the names of ids (`app.names`), loaded before the page's
    script. `/console/fonts/cjk` serves a CJK font the stylesheet names after the usual CJK
    system fonts (with a CJK `unicode-range`): a browser downloads it only when none
    of the client's own fonts can draw Chinese, so the console never shows empty boxes.
    """

    @app.get("/console/fonts/cjk", include_in_schema=False)
    async def cjk_font() -> FileResponse:
        font = web_cjk_font(app.state.settings.font_path)
        if font is None:
            raise HTTPException(404, "no CJK web font is installed")
        path, media_type = font
        return FileResponse(
            path, media_type=media_type, headers={"Cache-Control": "public, max-age=604800"}
        )

    @app.get("/console/names.js", include_in_schema=False)
    async def console_names() -> Response:
        return Response(
            names.script(),
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    app.mount("/console", StaticFiles(directory=STATIC_DIR), name="console")

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")


app = create_app()
