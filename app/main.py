"""The ASGI application: `create_app(settings)` and the module-level `app`.

Async resources (database connections, the checkpointer, the run manager, the
embedded model) are opened in the lifespan, never at import: importing this
module only reads settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.metrics import install_metrics
from app.routes import assets, knowledge, ops
from app.security import install_security
from core.settings import Settings
from graphs.context import AtelierContext
from knowledge.repository import SqliteNoteRepository
from providers.assets import AssetStore

VERSION = "0.1.0"
STATIC_DIR = Path(__file__).parent / "static"


def database_path(settings: Settings) -> str:
    """Return the path of the service's one SQLite database file."""
    return str(settings.data_dir / "atelier.db")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the service's resources for the app's lifetime and close them after."""
    settings: Settings = app.state.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    notes = await SqliteNoteRepository(database_path(settings)).open()
    try:
        app.state.notes = notes
        app.state.assets = AssetStore(settings.assets_dir)
        app.state.context = AtelierContext.from_settings(settings, notes=notes)
        yield
    finally:
        await notes.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the Atelier ASGI app for `settings` (read from the environment when None)."""
    settings = settings or Settings()
    app = FastAPI(
        title="Atelier",
        version=VERSION,
        summary="Multi-agent content studio, served in the LangGraph Platform dialect.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_metrics(app)
    install_security(app, settings)
    app.include_router(ops.router)
    app.include_router(knowledge.router)
    app.include_router(assets.router)
    mount_console(app)
    return app


def mount_console(app: FastAPI) -> None:
    """Serve the console page at `/` and its assets under `/console/` (no build step)."""
    app.mount("/console", StaticFiles(directory=STATIC_DIR), name="console")

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")


app = create_app()
