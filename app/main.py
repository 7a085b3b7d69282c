"""The ASGI application: `create_app(settings)` and the module-level `app`.

Async resources (the engine, its databases, the embedded model) are opened in the
lifespan (`app.composition.open_product`), never at import: importing this module
only reads settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from app import a2a, names
from app.access import PUBLIC
from app.composition import open_product
from app.errors import install_error_handlers
from app.mcp import mcp_router
from app.metrics import install_metrics
from app.openapi import install_openapi
from app.request_scope import RequestScopeMiddleware
from app.routes import (
    assets,
    assistants,
    audit,
    campaigns,
    crons,
    datasets,
    evaluation,
    experiments,
    exports,
    feedback,
    keys,
    knowledge,
    ops,
    runs,
    store,
    threads,
    usage,
)
from app.routes.ops import NotReadyError
from app.security import announce_auth_mode, announce_ignored_keys, install_security
from core.settings import Settings
from engine import AssistantFactory, WebhookSecrets
from providers.fonts import web_cjk_font

VERSION = "0.1.0"
STATIC_DIR = Path(__file__).parent / "static"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open Atelier's engine for the app's lifetime and close it after (`app.composition`).

    Embedded (no `DATABASE_URL`) everything persistent lives in DATA_DIR and runs
    execute in this process; scale-out (`DATABASE_URL`) runs are recorded in the shared
    queue and executed by RUN_WORKERS workers here and any `atelier worker`. Without
    `LLM_BASE_URL` the embedded model is served for the app's lifetime: if it cannot
    start, start-up fails with its one-line reason, and once it crashed /ready reports
    the model check failed with that reason. The services are kept on `app.state` for
    the dependency aliases of `app.deps`, the only readers.
    """
    settings: Settings = app.state.settings
    announce_auth_mode(settings)
    async with open_product(
        settings,
        role="serve",
        metrics=app.state.metrics,
        assistant_factory=app.state.assistant_factory,
        webhook_secrets=app.state.webhook_secrets,
    ) as engine:
        context = engine.context
        app.state.engine = engine
        app.state.notes = context.notes
        app.state.assets = context.assets
        app.state.context = context
        app.state.graphs = engine.graphs
        app.state.ready_checks = {
            **getattr(app.state, "ready_checks", {}),
            **engine.ready_checks,
            "model": model_check(context.models),
        }
        if engine.queue_depth is not None:
            app.state.queue_depth = engine.queue_depth
        await announce_ignored_keys(engine)
        yield


def model_check(models: Any) -> Callable[[], Awaitable[None]]:
    """Return the readiness check of the model factory (the embedded model's health)."""

    async def model_serves() -> None:
        problem = models.health()
        if problem:
            raise NotReadyError(problem)

    return model_serves


def create_app(
    settings: Settings | None = None,
    *,
    assistant_factory: AssistantFactory | None = None,
    webhook_secrets: WebhookSecrets | None = None,
) -> FastAPI:
    """Build the Atelier ASGI app for `settings` (read from the environment when None).

    Args:
        settings: The configuration.
        assistant_factory: Builds the assistants served, given the checkpointer
            (default: `graphs.assistants.ASSISTANTS`, `app.composition`); tests serve
            small graphs through it.
        webhook_secrets: The API keys' own webhook signing secrets (default: none,
            every delivery signed with WEBHOOK_SECRET).
    """
    settings = settings or Settings()
    app = FastAPI(
        title="Atelier",
        version=VERSION,
        summary="Multi-agent content studio, served in the LangGraph Platform dialect.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.assistant_factory = assistant_factory
    app.state.webhook_secrets = webhook_secrets
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
    app.include_router(keys.router)  # keys and any key's crons (admins; /keys/me: anyone)
    app.include_router(audit.router)
    app.include_router(usage.router)  # /keys/{key_id}/usage
    app.include_router(datasets.router)
    app.include_router(experiments.router)
    app.include_router(evaluation.router)
    app.include_router(campaigns.router)
    app.include_router(a2a.router)  # A2A agents: /a2a/{assistant_id} (app/a2a.py)
    app.include_router(mcp_router(app, settings))  # /mcp, its session manager in the lifespan
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

    @app.get("/console/fonts/cjk", include_in_schema=False, dependencies=[PUBLIC])
    async def cjk_font() -> FileResponse:
        font = web_cjk_font(app.state.settings.font_path)
        if font is None:
            raise HTTPException(404, "no CJK web font is installed")
        path, media_type = font
        return FileResponse(
            path, media_type=media_type, headers={"Cache-Control": "public, max-age=604800"}
        )

    @app.get("/console/names.js", include_in_schema=False, dependencies=[PUBLIC])
    async def console_names() -> Response:
        return Response(
            names.script(),
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    app.mount("/console", StaticFiles(directory=STATIC_DIR), name="console")

    @app.get("/", include_in_schema=False, dependencies=[PUBLIC])
    async def console() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")


app = create_app()
