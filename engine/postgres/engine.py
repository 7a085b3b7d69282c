"""Assemble the scale-out run engine of one process: API replica, worker, or both.

`open_engine_parts` opens, on an exit stack, what every process of the scale-out
deployment shares: the PostgreSQL backend (`engine.db.backend`: pools, schema upgrade,
notes, assets, checkpointer, Redis client), the model factory, the graphs' context
and the live frames. `EngineParts.start_worker` adds a worker with a storage and an
executor of its own; `atelier serve` (`app.main.open_scale_out`) and `atelier
worker` (`cli.worker`) are built from these.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from core.settings import Settings
from engine.assistants import Assistant, AssistantFactory
from engine.db.backend import PostgresBackend, open_backend
from engine.executor import InProcessExecutor
from engine.postgres import PostgresRunStorage
from engine.postgres.checkpoints import CheckpointFence, FencedPostgresSaver
from engine.postgres.live import RedisLiveFrames
from engine.postgres.worker import RunWorker
from studio.context import AtelierContext
from studio.services import open_services


@dataclass
class EngineParts:
    """What one process of the scale-out deployment runs its engine with."""

    settings: Settings
    backend: PostgresBackend
    models: Any
    context: AtelierContext
    graphs: dict[str, Assistant]
    live: RedisLiveFrames
    #: LangGraph's saver for the graphs, its writes fenced by the leases of `fence`.
    checkpointer: FencedPostgresSaver
    fence: CheckpointFence
    metrics: Any = None

    def storage(self) -> PostgresRunStorage:
        """Return a new run storage on the shared pool (enter it to start its event writer)."""
        return PostgresRunStorage(self.backend.pool, publish=self.live.publish)

    def executor_options(self, storage: PostgresRunStorage) -> dict[str, Any]:
        """Return the keyword arguments of an executor over `storage`."""
        callbacks = [self.metrics.callback] if self.metrics is not None else []
        return {
            "storage": storage,
            "hub": self.live,
            "assistants": self.graphs,
            "context": self.context,
            "checkpointer": self.checkpointer,
            "run_timeout": self.settings.run_timeout,
            "metrics": self.metrics,
            "callbacks": callbacks,
        }

    async def start_worker(self, stack: contextlib.AsyncExitStack, concurrency: int) -> RunWorker:
        """Start a worker with a storage and an executor of its own; `stack` stops it."""
        assert self.settings.database_url is not None
        storage = await stack.enter_async_context(self.storage())
        executor = InProcessExecutor(**self.executor_options(storage))
        worker = RunWorker(
            storage=storage,
            live=self.live,
            executor=executor,
            database_url=self.settings.database_url.get_secret_value(),
            redis=self.backend.redis,
            concurrency=concurrency,
            max_attempts=self.settings.run_max_attempts,
            lease_seconds=self.settings.run_lease_seconds,
            fence=self.fence,
            metrics=self.metrics,
        )
        await worker.start()
        stack.push_async_callback(worker.stop)
        return worker


async def open_engine_parts(
    assistant_factory: AssistantFactory,
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    metrics: Any = None,
    *,
    serves_streams: bool = True,
) -> EngineParts:
    """Open the shared parts of the scale-out engine on `stack` (see the module docstring).

    `serves_streams=False` (a worker process): the live frames only publish; the
    process does not receive every other process's frames.
    """
    backend = await stack.enter_async_context(open_backend(settings))
    # Every replica's notes and images: the deployment's PostgreSQL vault and asset store.
    context = await stack.enter_async_context(
        open_services(settings, notes=backend.notes, assets=backend.assets, observer=metrics)
    )
    models = context.models
    fence = CheckpointFence(backend.pool, settings.run_lease_seconds)
    checkpointer = FencedPostgresSaver(backend.pool, fence=fence)
    graphs = dict(assistant_factory(checkpointer))
    live = RedisLiveFrames(
        backend.redis,
        on_fallback=metrics.redis_fallback if metrics is not None else None,
        follow=serves_streams,
    )
    await live.start()
    stack.push_async_callback(live.close)
    return EngineParts(
        settings, backend, models, context, graphs, live, checkpointer, fence, metrics
    )
