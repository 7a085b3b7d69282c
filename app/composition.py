"""The product's composition: Atelier's assistants, services and hooks, on the engine.

`open_product(settings, role=…)` is what every Atelier process opens — `atelier serve`
(`app.main`), `atelier worker` and `atelier run` (`cli/`) — and the only place that
says what the generic engine (`engine.open_engine`) runs here: the assistants
(`graphs.assistants.ASSISTANTS`), the runtime context of runs (the studio's services,
`agentkit.services.open_services`, with the knowledge notes and assets in the
engine's database in scale-out), the Store's keyword ranking, the embedded model's
crash as an error users may read, OpenTelemetry tracing with the GenAI spans of
the graphs (`providers.tracing`), and what campaigns mean here
(`agentkit.campaigns.AtelierCampaigns`: the planner, the writer, the posts).
`langgraph dev` opens the same services (`graphs.served`). See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.store.base import Item

from agentkit.campaigns import AtelierCampaigns
from agentkit.context import AtelierContext
from agentkit.services import open_services
from core.settings import Settings
from engine import (
    AssistantFactory,
    ContextOpener,
    DatabasePools,
    Engine,
    Role,
    RunTracing,
    item_text,
    open_engine,
    registry,
)
from graphs.assistants import ASSISTANTS
from knowledge.repository import NoteRepository
from knowledge.retriever import query_words, text_relevance
from providers.assets import AssetStore
from providers.llm import AttemptObserver
from providers.local_llm import EmbeddedModelCrashedError
from providers.tracing import GenAISpans, tracer_provider

#: Errors whose messages a failed run may show its user (they are written for users).
PUBLIC_ERRORS: tuple[type[BaseException], ...] = (EmbeddedModelCrashedError,)


class KeywordRanker:
    """Ranks Store items by the vault's Chinese keyword relevance (`knowledge.retriever`).

    Whole query +0.5, each segmented word +0.1; items matching nothing are left out.
    The Store ranks with it when no EMBEDDINGS_BASE_URL is set (`engine.store`).
    """

    async def rank(self, query: str, items: Sequence[Item]) -> list[tuple[float, Item]]:
        """Return the items matching the query, best first; the others are left out."""
        words = query_words(query)
        scored = [(text_relevance(query, item_text(item.value), words), item) for item in items]
        matched = [(round(score, 4), item) for score, item in scored if score > 0]
        matched.sort(key=lambda pair: pair[0], reverse=True)
        return matched


@contextlib.contextmanager
def open_tracing(settings: Settings) -> Iterator[RunTracing | None]:
    """Open the run tracing `settings` configure for the block (None: tracing is off).

    The block's end flushes the spans not yet exported.
    """
    capture = settings.otel_instrumentation_genai_capture_message_content
    with tracer_provider(settings) as provider:
        if provider is None:
            yield None
            return
        yield RunTracing(
            provider,
            lambda tracer, run_span: GenAISpans(tracer, run_span, capture_content=capture),
        )


def context_opener(settings: Settings, observer: AttemptObserver | None = None) -> ContextOpener:
    """Return what opens the runs' context on the engine's pools (see the module docstring)."""

    @contextlib.asynccontextmanager
    async def open_context(pools: DatabasePools | None) -> AsyncIterator[AtelierContext]:
        notes: NoteRepository | None = None
        assets: AssetStore | None = None
        if pools is not None:  # scale-out: the notes and assets every replica shares
            from knowledge.postgres import PostgresNoteRepository  # the scale-out extra
            from providers.pg_assets import PostgresAssetStore

            notes = PostgresNoteRepository(pools.pool)
            assets = PostgresAssetStore(pools.sync_pool, settings.assets_dir)
        async with open_services(settings, notes=notes, assets=assets, observer=observer) as ctx:
            yield ctx

    return open_context


def campaign_hooks(context: AtelierContext) -> AtelierCampaigns:
    """Return Atelier's campaign hooks for the opened context (its image link signer)."""
    return AtelierCampaigns(context.asset_links)


@contextlib.asynccontextmanager
async def open_product(
    settings: Settings,
    *,
    role: Role,
    metrics: Any = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
    assistant_factory: AssistantFactory | None = None,
    concurrency: int | None = None,
) -> AsyncIterator[Engine]:
    """Open Atelier's engine for the block (see the module docstring); yield it.

    Args:
        settings: The deployment's settings.
        role: What the process runs (`engine.Role`).
        metrics: The process's metrics (`app.metrics.AtelierMetrics`): told about runs,
            webhooks, model retries, and every run's LLM calls (its callback).
        callbacks: More LangChain callbacks for every run (e.g. a call counter).
        assistant_factory: Builds the assistants served (default: `ASSISTANTS`);
            tests serve small graphs through it.
        concurrency: A worker's runs at once (`role="worker"`).
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    every_run = [*callbacks, *([metrics.callback] if metrics is not None else [])]
    with open_tracing(settings) as tracing:  # first in, last out: later spans are flushed
        async with open_engine(
            settings,
            role=role,
            assistants=assistant_factory or registry(ASSISTANTS),
            context=context_opener(settings, observer=metrics),
            ranker=KeywordRanker(),
            metrics=metrics,
            callbacks=every_run,
            tracing=tracing,
            public_errors=PUBLIC_ERRORS,
            concurrency=concurrency,
            campaigns=campaign_hooks,
        ) as engine:
            yield engine


__all__ = [
    "PUBLIC_ERRORS",
    "KeywordRanker",
    "campaign_hooks",
    "context_opener",
    "open_product",
    "open_tracing",
]
