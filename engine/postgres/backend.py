"""The scale-out deployment's run backend: the shared queue in PostgreSQL, and its workers.

`open_postgres_backend(settings)` opens, for the block, what every process of the
scale-out deployment runs its engine with: the PostgreSQL resources
(`engine.postgres.resources`: pools, schema upgrade, Redis client), LangGraph's
saver with its writes fenced by the leases of this process's workers, the live
frames over Redis, the run storage and the signals that wake and cancel workers.

Its executor (`engine.postgres.queue.QueueExecutor`) records and signals: workers in
any process execute the runs, and their lease sweep recovers them. `workers`
starts this process's own (RUN_WORKERS of them, each claiming up to
RUN_WORKER_CONCURRENCY runs), each with a storage and an executor of its own.
The engine's opener (`engine.opener.open_engine`) opens it in every process.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langgraph.store.postgres.aio import AsyncPostgresStore

from core.settings import Settings
from engine.execution import Runner
from engine.executor import InProcessExecutor
from engine.postgres import PostgresRunStorage
from engine.postgres.assistants import PostgresAssistantRepository
from engine.postgres.campaigns import PostgresCampaignRepository
from engine.postgres.checkpoints import CheckpointFence, FencedPostgresSaver, PostgresCheckpoints
from engine.postgres.crons import PostgresCronRepository
from engine.postgres.feedback import PostgresFeedbackRepository
from engine.postgres.live import RedisLiveFrames
from engine.postgres.queue import QueueExecutor
from engine.postgres.resources import PostgresBackend, open_backend
from engine.postgres.signals import RunSignals
from engine.postgres.store import open_postgres_store
from engine.postgres.worker import RunWorker
from engine.protocols import DatabasePools, ExecutorSetup
from engine.webhooks import Deliverer, webhook_metrics


@dataclass
class PostgresRunBackend:
    """The scale-out run backend of one process (an `engine.protocols.RunBackend`)."""

    settings: Settings
    #: Pools, the Redis client and their readiness checks.
    resources: PostgresBackend
    #: The API's run storage (each worker has its own on the same pool).
    storage: PostgresRunStorage
    live: RedisLiveFrames
    #: LangGraph's saver for the graphs, its writes fenced by the leases of `fence`.
    checkpointer: FencedPostgresSaver
    fence: CheckpointFence
    checkpoints: PostgresCheckpoints
    signals: RunSignals
    #: The crons; every process's scheduler fires their ticks, each once.
    crons: PostgresCronRepository
    #: Feedback on runs.
    feedback: PostgresFeedbackRepository
    #: LangGraph's store, in the service's database (`engine.postgres.store`).
    store: AsyncPostgresStore
    #: The assistants clients created, with their versions.
    assistants: PostgresAssistantRepository
    #: The campaigns and their publications; every process's driver and publisher claims them.
    campaigns: PostgresCampaignRepository
    #: Claim latency, resumes and lease losses of this process's workers.
    metrics: Any = None
    recovers_runs: bool = False

    @property
    def pools(self) -> DatabasePools:
        """The pools the product's stores (its notes, its assets) share."""
        return DatabasePools(pool=self.resources.pool, sync_pool=self.resources.asset_pool)

    @property
    def ready_checks(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """PostgreSQL's and Redis's readiness, and the run storage's."""
        return {**self.resources.ready_checks, "runs": self.storage.ping}

    @property
    def queue_depth(self) -> Callable[[], Awaitable[int]]:
        """Reads how many runs are pending in the shared queue."""
        return self.storage.runs.queue_depth

    def runner(self, storage: PostgresRunStorage, setup: ExecutorSetup) -> Runner:
        """Return a runner over `storage` with the fenced saver."""
        return Runner(
            storage=storage,
            checkpointer=self.checkpointer,
            checkpoints=self.checkpoints,
            setup=setup,
        )

    def executor(self, setup: ExecutorSetup) -> QueueExecutor:
        """Return the executor that leaves runs to the workers of the queue."""
        return QueueExecutor(self.runner(self.storage, setup), self.live, self.signals)

    @contextlib.asynccontextmanager
    async def workers(
        self, setup: ExecutorSetup, *, count: int | None = None, concurrency: int | None = None
    ) -> AsyncIterator[list[RunWorker]]:
        """Run workers in this process for the block: claim, execute, hand back on exit.

        With at least one worker, a webhook deliverer (`engine.webhooks`) runs beside them,
        sharing the outbox with every other process's.

        Args:
            setup: What they execute runs with.
            count: How many (default RUN_WORKERS).
            concurrency: Runs each executes at once at most (default RUN_WORKER_CONCURRENCY).
        """
        count = self.settings.run_workers if count is None else count
        if concurrency is None:
            concurrency = self.settings.run_worker_concurrency
        async with contextlib.AsyncExitStack() as stack:
            started = [await self._start_worker(stack, setup, concurrency) for _ in range(count)]
            if started:  # a process that executes runs reports their ends too
                metrics = webhook_metrics(setup.metrics) or webhook_metrics(self.metrics)
                deliverer = Deliverer(self.storage.deliveries, setup.webhooks, metrics)
                await deliverer.start()
                stack.push_async_callback(deliverer.stop)
            yield started

    async def _start_worker(
        self, stack: contextlib.AsyncExitStack, setup: ExecutorSetup, concurrency: int
    ) -> RunWorker:
        """Start a worker with a storage and an executor of its own; `stack` stops it."""
        assert self.settings.database_url is not None
        storage = await stack.enter_async_context(
            PostgresRunStorage(self.resources.pool, publish=self.live.publish)
        )
        worker = RunWorker(
            storage=storage,
            live=self.live,
            executor=InProcessExecutor(self.runner(storage, setup), self.live),
            database_url=self.settings.database_url.get_secret_value(),
            redis=self.resources.redis,
            concurrency=concurrency,
            max_attempts=self.settings.run_max_attempts,
            lease_seconds=self.settings.run_lease_seconds,
            fence=self.fence,
            metrics=self.metrics,
        )
        await worker.start()
        stack.push_async_callback(worker.stop)
        self.signals.local_wake.append(worker.wake)
        self.signals.local_cancel.append(worker.cancel)
        return worker


@contextlib.asynccontextmanager
async def open_postgres_backend(
    settings: Settings, *, metrics: Any = None, serves_streams: bool = True
) -> AsyncIterator[PostgresRunBackend]:
    """Open the scale-out backend of this process for the block (see the module docstring).

    Args:
        settings: The deployment's settings (`DATABASE_URL`, `REDIS_URL`, the run limits).
        metrics: Told about Redis fallbacks and the workers' claims, resumes and leases.
        serves_streams: False in a worker process: the live frames only publish; the
            process does not receive every other process's frames.

    Raises:
        ValueError: `DATABASE_URL` is not set.
        psycopg_pool.PoolTimeout: PostgreSQL cannot be reached.
    """
    async with contextlib.AsyncExitStack() as stack:
        resources = await stack.enter_async_context(open_backend(settings))
        fence = CheckpointFence(resources.pool, settings.run_lease_seconds)
        checkpointer = FencedPostgresSaver(resources.pool, fence=fence)
        live = RedisLiveFrames(
            resources.redis,
            on_fallback=metrics.redis_fallback if metrics is not None else None,
            follow=serves_streams,
        )
        await live.start()
        stack.push_async_callback(live.close)
        storage = await stack.enter_async_context(
            PostgresRunStorage(resources.pool, publish=live.publish)
        )
        store = await stack.enter_async_context(open_postgres_store(resources.pool))
        yield PostgresRunBackend(
            settings=settings,
            resources=resources,
            storage=storage,
            live=live,
            checkpointer=checkpointer,
            fence=fence,
            checkpoints=PostgresCheckpoints(checkpointer),
            signals=RunSignals(storage.runs, resources.redis),
            crons=PostgresCronRepository(resources.pool),
            feedback=PostgresFeedbackRepository(resources.pool),
            store=store,
            assistants=PostgresAssistantRepository(resources.pool),
            campaigns=PostgresCampaignRepository(resources.pool),
            metrics=metrics,
        )
