"""Runtime context of Atelier's graphs: the services nodes use, injected per run.

Graphs are compiled with `context_schema=AtelierContext` and invoked with
`context=...`; nodes read it from `Runtime[AtelierContext]`. Nothing here is
checkpointed, so it may hold clients, stores and model factories. Tests build a
context with fake models; the service builds one from `Settings` at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from langgraph.runtime import Runtime

from core.settings import Settings
from graphs.state import TeamLimits
from knowledge.coordinator import KnowledgeCoordinator
from knowledge.repository import InMemoryNoteRepository, NoteRepository
from providers.assets import AssetStore
from providers.images import ImageProvider, build_image_provider
from providers.llm import ModelFactory, OpenAIModelFactory


@dataclass
class AtelierContext:
    """Services and limits one run needs."""

    models: ModelFactory  # role → chat model; the only source of LLMs
    assets: AssetStore  # where generated images are written
    notes: NoteRepository  # the knowledge vault, searched by research and rag
    image_providers: dict[str, ImageProvider]  # "local" / "openai" → provider
    default_image_provider: str = "local"
    limits: TeamLimits = field(default_factory=lambda: TeamLimits())  # overrides of defaults
    today: Callable[[], date] = date.today  # the critic's "today", replaceable in tests
    # --- pipeline (PRODUCT.md §1.1, §1.3) ---
    coordinator: KnowledgeCoordinator = field(default_factory=KnowledgeCoordinator)  # rag, critic
    max_retry_count: int = 3  # retries after the first attempt (MAX_RETRY_COUNT)
    max_replans: int = 1  # critic → planner loops per run (ignored blocker notes)
    critic_pass_threshold: float = 0.7  # judge score needed to pass (CRITIC_PASS_THRESHOLD)
    critic_timeout: float = 8.0  # seconds the LLM judge may take (Settings.judge_timeout)
    max_notes: int = 6  # notes rag injects per attempt

    def image_provider(self, name: str | None) -> ImageProvider:
        """Return the named image provider, or the default one."""
        key = name or self.default_image_provider
        try:
            return self.image_providers[key]
        except KeyError:
            raise ValueError(
                f"image provider {key!r} is not configured; available: "
                f"{', '.join(sorted(self.image_providers))}"
            ) from None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        models: ModelFactory | None = None,
        notes: NoteRepository | None = None,
    ) -> AtelierContext:
        """Build a context from settings; unset pieces get their embedded defaults."""
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
        return cls(
            models=models or OpenAIModelFactory(settings),
            assets=AssetStore(settings.assets_dir),
            notes=notes or InMemoryNoteRepository(),
            image_providers=providers,
            default_image_provider=settings.image_provider,
            limits=TeamLimits(
                max_team_steps=settings.max_team_steps,
                max_invalid_decisions=settings.max_invalid_decisions,
                max_same_agent_repeats=settings.max_same_agent_repeats,
                max_research_tool_rounds=settings.max_research_tool_rounds,
                max_image_tool_rounds=settings.max_image_tool_rounds,
                max_supervisor_tool_rounds=settings.max_supervisor_tool_rounds,
                quality_threshold=settings.quality_threshold,
            ),
            max_retry_count=settings.max_retry_count,
            critic_pass_threshold=settings.critic_pass_threshold,
            critic_timeout=settings.judge_timeout(embedded=settings.llm_base_url is None),
        )


_default_context: AtelierContext | None = None


def context_of(runtime: Runtime[Any] | Any) -> AtelierContext:
    """Return the run's context, or one built from the environment when none was given.

    LangGraph Studio and `langgraph dev` invoke graphs without our context object;
    for them the context is built once from `Settings()`. Everything else passes
    one explicitly.
    """
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, AtelierContext):
        return ctx
    global _default_context
    if _default_context is None:
        _default_context = AtelierContext.from_settings(Settings())
    return _default_context
