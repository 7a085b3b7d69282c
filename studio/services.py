"""The one composition root of the studio's services: models, notes, assets, images.

Every entry point opens the services a run needs here and nowhere else: `atelier
serve` (embedded and scale-out), `atelier worker`, `atelier run`, `langgraph dev`
(`graphs.served`) and a notebook that compiles `build_pipeline()` without a context
(`studio.context.context_of`). What differs between them is passed in, not rebuilt:
the scale-out deployment hands over its PostgreSQL notes and shared asset store, a
server its metrics observer.

Everything blocking (the embedded model's file lookup, the CJK font, jieba's
dictionary, building the chat models and their HTTP clients) runs in worker threads,
so no run pays for it on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from core.settings import Settings
from knowledge.repository import InMemoryNoteRepository, NoteRepository, SqliteNoteRepository
from knowledge.segment import load_dictionary
from providers.assets import AssetStore
from providers.images import ImageProvider, build_image_provider
from providers.llm import AttemptObserver, ModelFactory, OpenAIModelFactory, open_model_factory
from providers.local_llm import model_path
from studio.context import AtelierContext
from studio.limits import limits_from_settings


def image_providers(settings: Settings) -> dict[str, ImageProvider]:
    """Return the image providers `settings` configure: `local` always, `openai` when keyed."""
    providers: dict[str, ImageProvider] = {
        "local": build_image_provider("local", font_path=settings.font_path)
    }
    if settings.image_api_base_url and settings.image_api_key:
        providers["openai"] = build_image_provider(
            "openai",
            openai_base_url=settings.image_api_base_url,
            openai_api_key=settings.image_api_key,
            openai_model=settings.image_model,
            timeout=settings.image_timeout,
        )
    return providers


def build_context(
    settings: Settings,
    *,
    models: ModelFactory,
    notes: NoteRepository | None = None,
    assets: AssetStore | None = None,
) -> AtelierContext:
    """Assemble a run context from settings and opened services (blocking: call it in a thread).

    Unset pieces get their defaults: an in-memory vault, the assets under `DATA_DIR`.

    Loads what a run would otherwise load lazily: jieba's dictionary (rag, the critic
    and knowledge search segment Chinese text), the local cards' CJK font, and every
    role's chat model with its HTTP clients.
    """
    load_dictionary()
    if isinstance(models, OpenAIModelFactory):
        models.prepare()
    return AtelierContext(
        models=models,
        assets=assets or AssetStore(settings.assets_dir),
        notes=notes if notes is not None else InMemoryNoteRepository(),
        image_providers=image_providers(settings),
        default_image_provider=settings.image_provider,
        limits=limits_from_settings(settings),
        max_retry_count=settings.max_retry_count,
        critic_pass_threshold=settings.critic_pass_threshold,
        critic_timeout=settings.judge_timeout(embedded=settings.llm_base_url is None),
    )


@asynccontextmanager
async def open_services(
    settings: Settings,
    *,
    notes: NoteRepository | None = None,
    assets: AssetStore | None = None,
    observer: AttemptObserver | None = None,
) -> AsyncIterator[AtelierContext]:
    """Open the studio's services for the block and yield the run context they make.

    Args:
        settings: The deployment's settings.
        notes: The knowledge vault to use; by default the SQLite one in
            `DATA_DIR/atelier.db`, opened and closed with the block.
        assets: The asset store; by default the files under `DATA_DIR/assets`.
        observer: Told about every retried and failed model call, by role (metrics).

    Without `LLM_BASE_URL` the embedded model is served for the block's duration and
    has answered one completion before the block starts; if it cannot start, this
    raises with its one-line reason.
    """
    await asyncio.to_thread(settings.data_dir.mkdir, parents=True, exist_ok=True)
    if settings.llm_base_url is None and settings.local_model_path is None:
        # The embedded model: find its GGUF file (a directory search) in a thread.
        found = await asyncio.to_thread(model_path, settings)
        settings = settings.model_copy(update={"local_model_path": found})
    async with AsyncExitStack() as stack:
        if notes is None:
            notes = await stack.enter_async_context(SqliteNoteRepository(settings.database_path))
        models = await stack.enter_async_context(open_model_factory(settings, observer=observer))
        yield await asyncio.to_thread(
            build_context, settings, models=models, notes=notes, assets=assets
        )
