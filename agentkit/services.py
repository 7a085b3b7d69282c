"""The studio's services a run needs (models, notes, assets, images), opened in one place.

`open_services` opens them for every entry point — the product's composition
(`app.composition`, for `atelier serve`, `worker` and `run`), `langgraph dev`
(`graphs.served`) — with what differs passed in (scale-out's notes and assets, a
server's metrics observer). A graph run given no services (a notebook's
`build_pipeline().ainvoke(...)`) gets those of `Settings()` from `ensure_services`:
opened by the first such run on an event loop, shared by the loop's runs, closed as
`asyncio.run()` ends. See docs/python-api.md and docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from langgraph.runtime import Runtime, get_runtime

from agentkit.context import AtelierContext, bind_services, has_services
from agentkit.limits import limits_from_settings
from core.settings import Settings
from knowledge.repository import InMemoryNoteRepository, NoteRepository, SqliteNoteRepository
from knowledge.segment import load_dictionary
from providers.asset_links import AssetLinks
from providers.assets import AssetStore
from providers.images import ImageProvider, build_image_provider
from providers.llm import AttemptObserver, ModelFactory, OpenAIModelFactory, open_model_factory
from providers.local_llm import model_path


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
            concurrency=settings.image_concurrency,
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
        asset_links=AssetLinks.from_settings(settings),
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


# Per event loop: whether the services of runs given none are open, and the task
# that keeps them open until the loop shuts down (held here: a loop keeps only weak
# references to its tasks).
_opened: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
_keepers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}


async def ensure_services(runtime: Runtime[Any] | None = None) -> None:
    """Open the services of `Settings()` for this event loop if the run has none.

    A no-op for a run given an `AtelierContext` or served with bound services
    (`graphs.served`). Otherwise the first such run on the loop opens the default
    services; later and concurrent runs wait for that opening, and a failed opening
    is tried again by the next run. They live as long as the loop (their clients
    are tied to it): `asyncio.run()` closes them as it cancels its tasks; a loop
    driven by hand should cancel its tasks before it closes, as `asyncio.run()`
    does. Without `LLM_BASE_URL` they serve the embedded model. The pipeline's nodes
    and the team's entry call it.

    Args:
        runtime: The run's runtime; by default the current run's.

    Raises:
        Exception: What opening the services raised (`Settings()` rejecting a
            value, the embedded model failing to start), with its one-line reason.
    """
    if has_services(runtime if runtime is not None else get_runtime()):
        return
    loop = asyncio.get_running_loop()
    opened = _opened.get(loop)
    if opened is None:  # no await since the lookup: concurrent runs share one opening
        opened = _opened[loop] = loop.create_future()
        # A context of its own: the keeper outlives the run that started it.
        keeper = loop.create_task(_keep_default_services(opened), context=contextvars.Context())
        _keepers[loop] = keeper
    # A run cancelled while it waits leaves the opening to the others.
    await asyncio.shield(opened)


async def _keep_default_services(opened: asyncio.Future[None]) -> None:
    """Open the services of `Settings()`, bind them to this loop and keep them until cancelled.

    `asyncio.run()` cancels every task as it finishes, this one too, which closes
    the services on their own loop. A failure to open is handed to the runs
    waiting on `opened`, and the loop's next run tries again.
    """
    loop = asyncio.get_running_loop()
    try:
        settings = await asyncio.to_thread(Settings)  # reads `.env`
        async with open_services(settings) as context:
            with bind_services(context, loop=loop):
                opened.set_result(None)
                await asyncio.Event().wait()  # until cancelled
    except Exception as exc:
        if opened.done():  # closing failed: the loop's shutdown reports it
            raise
        opened.set_exception(exc)
    finally:
        if not opened.done():  # cancelled while opening
            opened.cancel()
        del _opened[loop], _keepers[loop]
