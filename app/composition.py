"""The product's composition: Atelier's assistants, services and hooks, on the engine.

`open_product(settings, role=…)` is what every Atelier process opens — `atelier serve`
(`app.main`), `atelier worker` and `atelier run` (`cli/`) — and the only place that
says what the generic engine (`engine.open_engine`) runs here: the assistants
(`graphs.assistants.ASSISTANTS`), the runtime context of runs (the studio's services,
`agentkit.services.open_services`, with the knowledge notes and assets in the
engine's database in scale-out), the Store's keyword ranking
(`knowledge.store_ranking.KeywordRanker`), the embedded model's
crash as an error users may read, the meter of each run's LLM usage and cost
(`providers.usage.RunMeter`: the keys' usage and spend caps), OpenTelemetry tracing
with the GenAI spans of the graphs (`providers.tracing`), the evaluation hooks
(`graphs.evaluation`) with the judges as hidden assistants, and what campaigns mean
here (`graphs.campaigns.AtelierCampaigns`: the planner, the writer, the posts).
`langgraph dev` opens the same services (`graphs.served`). See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from agentkit.context import AtelierContext
from agentkit.services import open_services
from core.settings import Settings
from engine import (
    AssistantFactory,
    ContextOpener,
    DatabasePools,
    Engine,
    QuotaOverrides,
    Role,
    RunTracing,
    WebhookSecrets,
    open_engine,
    registry,
)
from graphs.assistants import ASSISTANTS, INTERNAL_ASSISTANTS
from graphs.campaigns import AtelierCampaigns
from graphs.evaluation import AtelierEvaluation
from knowledge.repository import NoteRepository
from knowledge.store_ranking import KeywordRanker
from providers.assets import AssetStore
from providers.llm import AttemptObserver
from providers.local_llm import EmbeddedModelCrashedError
from providers.tracing import GenAISpans, tracer_provider
from providers.usage import RunMeter

log = logging.getLogger(__name__)

#: Said at start-up when a spend cap is set and nothing is priced (docs/keys.md).
SPEND_CAP_UNPRICED = (
    "QUOTA_MONTHLY_SPEND is set but LLM_PRICES prices no model: every run's cost is "
    "unknown, and the cap, which counts known costs only, will refuse nothing"
)
#: Errors whose messages a failed run may show its user (they are written for users).
PUBLIC_ERRORS: tuple[type[BaseException], ...] = (EmbeddedModelCrashedError,)


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
    quota_overrides: QuotaOverrides | None = None,
    webhook_secrets: WebhookSecrets | None = None,
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
        quota_overrides: Returns a key's quota overrides by owner id (its managed key's
            `quotas`), over the `QUOTA_*` settings; None: the settings for every key.
        webhook_secrets: The API keys' own webhook signing secrets
            (`engine.WebhookSecrets`); None: every delivery is signed with WEBHOOK_SECRET.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.quota_monthly_spend is not None and not settings.llm_prices:
        log.warning(SPEND_CAP_UNPRICED)
    every_run = [*callbacks, *([metrics.callback] if metrics is not None else [])]
    with open_tracing(settings) as tracing:  # first in, last out: later spans are flushed
        async with open_engine(
            settings,
            role=role,
            assistants=assistant_factory or registry((*ASSISTANTS, *INTERNAL_ASSISTANTS)),
            context=context_opener(settings, observer=metrics),
            ranker=KeywordRanker(),
            metrics=metrics,
            callbacks=every_run,
            tracing=tracing,
            public_errors=PUBLIC_ERRORS,
            concurrency=concurrency,
            meter=RunMeter(settings.llm_price_currency),
            quota_overrides=quota_overrides,
            webhook_secrets=webhook_secrets,
            evaluation=AtelierEvaluation(),
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
