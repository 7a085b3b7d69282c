"""Runtime context of Atelier's graphs: the services nodes use, injected per run.

Graphs are compiled with `context_schema=AtelierContext` and invoked with
`context=...`; nodes read it with `context_of(runtime)`. Nothing here is
checkpointed, so it may hold clients, stores and model factories. Tests build a
context with fake models; every entry point opens one with
`agentkit.services.open_services` (the one composition root).

LangGraph's own server (`langgraph dev`, Studio, the Platform) cannot pass such
an object: it sends a run's `context` as JSON and builds the context schema from
it. The graphs it serves (`graphs.served`) are therefore compiled with
`context_schema=RunOptions`, a serializable model of what a client may set per
run, and the services are bound once at the server's start-up
(`bind_services`); `context_of` joins the two.

A run given no context anywhere else (`build_pipeline()` in a notebook) gets the
services `agentkit.services.ensure_services` opened from `Settings()` for its event
loop and bound to it (`bind_services(..., loop=...)`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field

from agentkit.limits import TeamLimits
from knowledge.coordinator import KnowledgeCoordinator
from knowledge.repository import NoteRepository
from providers.asset_links import AssetLinks
from providers.assets import AssetStore
from providers.images import ImageProvider
from providers.llm import ModelFactory


@dataclass
class AtelierContext:
    """Services and limits one run needs."""

    models: ModelFactory  # role → chat model; the only source of LLMs
    assets: AssetStore  # where generated images are written
    notes: NoteRepository  # the knowledge vault, searched by research and rag
    image_providers: dict[str, ImageProvider]  # "local" / "openai" → provider
    default_image_provider: str = "local"
    # The deployment's loop bounds; agentkit.limits resolves them over the defaults.
    limits: TeamLimits = field(default_factory=lambda: TeamLimits())
    today: Callable[[], date] = date.today  # the critic's "today", replaceable in tests
    # --- pipeline (PRODUCT.md §1.1, §1.3) ---
    coordinator: KnowledgeCoordinator = field(default_factory=KnowledgeCoordinator)  # rag, critic
    max_retry_count: int = 3  # retries after the first attempt (MAX_RETRY_COUNT)
    max_replans: int = 1  # critic → planner loops per run (ignored blocker notes)
    critic_pass_threshold: float = 0.7  # judge score needed to pass (CRITIC_PASS_THRESHOLD)
    critic_timeout: float = 8.0  # seconds the LLM judge may take (Settings.judge_timeout)
    max_notes: int = 6  # notes rag injects per attempt
    # Signs the image links of the post message (providers.asset_links); None: plain links.
    asset_links: AssetLinks | None = None

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

    def with_options(self, options: RunOptions) -> AtelierContext:
        """Return this context with a run's options applied (unset options keep its values)."""
        changes = options.model_dump(exclude_none=True)
        return replace(self, **changes) if changes else self


class RunOptions(BaseModel):
    """What a client may set per run in `context` on LangGraph's own server.

    The context schema of the graphs `langgraph.json` serves: LangGraph builds it
    from the run's JSON `context` (the server drops keys it does not list, and
    this model rejects values out of range, which fails the run). Unset fields
    keep the server's settings. Only options that leave the graphs' loop bounds
    (and so their recursion limits) alone are offered.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    critic_pass_threshold: float | None = Field(
        default=None, ge=0, le=1, description="Judge score a post needs to pass (0-1)."
    )
    critic_timeout: float | None = Field(
        default=None, gt=0, le=120, description="Seconds the LLM judge may take."
    )


# The services bound for runs given none: by the event loop they serve (the services
# `agentkit.services.ensure_services` opens), or for the whole process (None: LangGraph's
# own server, `graphs.served`).
_bound: dict[asyncio.AbstractEventLoop | None, AtelierContext] = {}


@contextmanager
def bind_services(
    context: AtelierContext, *, loop: asyncio.AbstractEventLoop | None = None
) -> Iterator[AtelierContext]:
    """Serve runs that get no `AtelierContext` of their own with `context` inside the block.

    For the whole process by default (LangGraph's own server passes each run a
    `RunOptions`, or nothing, which `context_of` applies to the context bound here), or
    for the runs of one event loop only (`loop`: a context whose clients are tied to
    it); the process's take precedence.

    Raises:
        RuntimeError: Services are bound for the process (or that loop) already.
    """
    if loop in _bound:
        where = "to this event loop" if loop is not None else "in this process"
        raise RuntimeError(f"services are already bound {where}")
    _bound[loop] = context
    try:
        yield context
    finally:
        del _bound[loop]


def bound_services() -> AtelierContext | None:
    """Return the services bound for runs without their own: the process's, else this loop's."""
    if None in _bound:
        return _bound[None]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # called outside any event loop
        return None
    return _bound.get(loop)


def has_services(runtime: Runtime[Any] | Any) -> bool:
    """Return whether `context_of(runtime)` finds services (it may still reject bad options)."""
    return isinstance(getattr(runtime, "context", None), AtelierContext) or (
        bound_services() is not None
    )


def context_of(runtime: Runtime[Any] | Any) -> AtelierContext:
    """Return the services and settings of a run.

    An `AtelierContext` passed with the run (the service, the CLI, tests) is used
    as it is. Otherwise the run's options, a `RunOptions` or a mapping of its
    fields (LangGraph's own server), are applied to the bound services: the
    process's, else those bound for the running event loop (`bind_services`).

    Raises:
        RuntimeError: The run has no `AtelierContext` and no services are bound.
    """
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, AtelierContext):
        return ctx
    base = bound_services()
    if base is None:
        raise RuntimeError(
            "this run has no AtelierContext and no services are bound: pass "
            "context=AtelierContext(...), run graphs.pipeline / graphs.team, whose "
            "nodes open the services of Settings() (agentkit.services.ensure_services), "
            "or serve the graphs through langgraph.json (graphs.served)"
        )
    if ctx is None:
        return base
    if isinstance(ctx, Mapping):
        ctx = RunOptions.model_validate(ctx)
    if not isinstance(ctx, RunOptions):
        raise TypeError(f"unexpected run context {type(ctx).__name__}; expected RunOptions")
    return base.with_options(ctx)
