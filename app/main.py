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
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from app import a2a, names
from app.errors import install_error_handlers
from app.mcp import mcp_router
from app.metrics import install_metrics
from app.openapi import install_openapi
from app.routes import assets, assistants, exports, knowledge, ops, runs, threads
from app.routes.ops import NotReadyError
from app.scope import RequestScopeMiddleware
from app.security import announce_auth_mode, install_security
from core.settings import Settings
from engine.assistants import AssistantFactory, registry
from engine.hub import Hub
from engine.manager import RunManager
from engine.sqlite import BUSY_TIMEOUT, SqliteRunStorage
from graphs.assistants import ASSISTANTS
from providers.fonts import web_cjk_font
from studio.services import open_services

VERSION = "0.1.0"
STATIC_DIR = Path(__file__).parent / "static"


def database_path(settings: Settings) -> str:
    """Return the path of the service's one SQLite database file."""
    return str(settings.database_path)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the service's resources for the app's lifetime and close them after.

    Embedded (no `DATABASE_URL`): everything persistent lives in `DATA_DIR/atelier.db`
    (WAL): the knowledge notes, LangGraph's checkpoints (`AsyncSqliteSaver`), and the
    run store's threads, runs and event logs; runs execute in this process. Scale-out
    (`DATABASE_URL`): see `open_scale_out`. Without `LLM_BASE_URL` the embedded model
    is served for the app's lifetime (`providers.llm.open_model_factory`); if it cannot
    start or fails its self-test completion, start-up fails with its one-line reason,
    and once it crashed /ready reports the model check failed with that reason.
    """
    settings: Settings = app.state.settings
    announce_auth_mode(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        if settings.database_url is not None:
            await open_scale_out(app, settings, stack)
            yield
            return
        db = database_path(settings)
        context = await stack.enter_async_context(
            open_services(settings, observer=app.state.metrics)
        )
        models = context.models
        app.state.notes = context.notes
        app.state.assets = context.assets
        app.state.context = context

        checkpointer = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(db))
        # One rule for every writer of atelier.db (see engine/sqlite/database.py): a busy timeout,
        # and writes that begin with a write. The saver keeps the second by itself (each
        # operation under its lock, each write transaction opened by its INSERT).
        await checkpointer.conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
        # The run store's durability, not more: in WAL mode NORMAL survives a killed
        # process (only a power cut may lose the last commits, the run store's as well),
        # where the default FULL flushes the disk on every checkpoint (~60 a run).
        await checkpointer.conn.execute("PRAGMA synchronous=NORMAL")
        await checkpointer.setup()
        graphs = dict(app.state.assistant_factory(checkpointer))
        app.state.graphs = sorted(graphs)
        hub = Hub()
        storage = await stack.enter_async_context(SqliteRunStorage(db, publish=hub.publish))
        metrics = app.state.metrics
        manager = RunManager(
            storage=storage,
            hub=hub,
            assistants=graphs,
            context=context,
            checkpointer=checkpointer,
            run_timeout=settings.run_timeout,
            max_attempts=settings.run_max_attempts,
            event_retention_hours=settings.event_retention_hours,
            metrics=metrics,
            callbacks=[metrics.callback],
        )
        app.state.runs = await stack.enter_async_context(manager)
        app.state.ready_checks = {
            **getattr(app.state, "ready_checks", {}),
            "runs": storage.ping,
            "model": model_check(models),
        }
        yield


def model_check(models: Any) -> Callable[[], Awaitable[None]]:
    """Return the readiness check of the model factory (the embedded model's health)."""

    async def model_serves() -> None:
        problem = models.health()
        if problem:
            raise NotReadyError(problem)

    return model_serves


async def open_scale_out(app: FastAPI, settings: Settings, stack: AsyncExitStack) -> None:
    """Open the scale-out deployment's parts on `stack` (README "Scale out").

    PostgreSQL holds the notes, assets, checkpoints, threads, runs and event logs
    (`engine.db.backend`); Redis (when `REDIS_URL` is set) carries live frames, wake-ups
    and cancels. The run manager records runs in the queue and leaves their execution
    to workers (`QueueExecutor`): RUN_WORKERS of them in this process (0: an API-only
    replica), each claiming up to RUN_WORKER_CONCURRENCY runs, and any number in
    `atelier worker` processes.
    """
    from engine.postgres.engine import open_engine_parts
    from engine.postgres.queue import QueueExecutor
    from engine.postgres.signals import RunSignals

    parts = await open_engine_parts(app.state.assistant_factory, settings, stack, app.state.metrics)
    app.state.notes = parts.backend.notes
    app.state.assets = parts.backend.assets
    app.state.context = parts.context
    app.state.graphs = sorted(parts.graphs)
    storage = await stack.enter_async_context(parts.storage())
    signals = RunSignals(storage.runs, parts.backend.redis)
    executor = QueueExecutor(signals=signals, **parts.executor_options(storage))
    manager = RunManager(
        storage=storage,
        hub=parts.live,
        assistants=parts.graphs,
        context=parts.context,
        checkpointer=parts.checkpointer,
        run_timeout=settings.run_timeout,
        max_attempts=settings.run_max_attempts,
        event_retention_hours=settings.event_retention_hours,
        recovery_interval=0,  # workers and their lease sweep recover runs
        executor=executor,
    )
    app.state.runs = await stack.enter_async_context(manager)
    for _ in range(settings.run_workers):
        worker = await parts.start_worker(stack, settings.run_worker_concurrency)
        signals.local_wake.append(worker.wake)
        signals.local_cancel.append(worker.cancel)
    app.state.ready_checks = {
        **getattr(app.state, "ready_checks", {}),
        **parts.backend.ready_checks,
        "runs": storage.ping,
        "model": model_check(parts.models),
    }
    app.state.queue_depth = storage.runs.queue_depth


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
