"""The embedded deployment's run backend: one SQLite file, runs executed in this process.

`open_sqlite_backend(settings)` opens, for the block, everything of the run engine
that lives in `DATA_DIR/atelier.db` (WAL): LangGraph's checkpoints
(`AsyncSqliteSaver`) and the run store's threads, runs and event logs, with the
in-memory fan-out of their frames (`engine.hub.Hub`), and LangGraph's store in
`DATA_DIR/store.db` (`engine.sqlite.store`). The product's own tables (its knowledge
notes) live in the same file, opened by the product. Runs execute in this process
(`engine.executor.InProcessExecutor`), which recovers the runs a previous one left,
and the crons' ticks fire here too (`engine.sqlite.crons`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore

from core.settings import Settings
from engine.execution import Runner
from engine.executor import InProcessExecutor
from engine.hub import Hub
from engine.protocols import DatabasePools, ExecutorSetup
from engine.sqlite import BUSY_TIMEOUT, SqliteRunStorage
from engine.sqlite.assistants import SqliteAssistantRepository
from engine.sqlite.campaigns import SqliteCampaignRepository
from engine.sqlite.checkpoints import SqliteCheckpoints
from engine.sqlite.crons import SqliteCronRepository
from engine.sqlite.event_log import RETRY_FOR
from engine.sqlite.feedback import SqliteFeedbackRepository
from engine.sqlite.ownership import own_data_dir
from engine.sqlite.store import STORE_FILE, open_sqlite_store
from engine.webhooks import Deliverer, webhook_metrics


@dataclass
class SqliteRunBackend:
    """The embedded run backend (an `engine.protocols.RunBackend`)."""

    storage: SqliteRunStorage
    live: Hub
    checkpointer: AsyncSqliteSaver
    checkpoints: SqliteCheckpoints
    #: The crons, in the same file; this process's run manager fires them.
    crons: SqliteCronRepository
    #: Feedback on runs, in the same file.
    feedback: SqliteFeedbackRepository
    #: LangGraph's store, in `DATA_DIR/store.db` (`engine.sqlite.store`).
    store: AsyncSqliteStore
    #: The assistants clients created, with their versions.
    assistants: SqliteAssistantRepository
    #: The campaigns and their publications, in the same file.
    campaigns: SqliteCampaignRepository
    #: No pools: the product opens its own stores in DATA_DIR.
    pools: DatabasePools | None = None
    recovers_runs: bool = True
    ready_checks: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    queue_depth: Callable[[], Awaitable[int]] | None = None

    def executor(self, setup: ExecutorSetup) -> InProcessExecutor:
        """Return an executor running the runs in this process."""
        runner = Runner(
            storage=self.storage,
            checkpointer=self.checkpointer,
            checkpoints=self.checkpoints,
            setup=setup,
        )
        return InProcessExecutor(runner, self.live)

    @contextlib.asynccontextmanager
    async def workers(
        self, setup: ExecutorSetup, *, count: int | None = None, concurrency: int | None = None
    ) -> AsyncIterator[list[object]]:
        """Start no worker (the executor runs every run here); deliver webhooks.

        The webhook deliverer runs for the block; the leases a stopped process left are
        freed first, so its deliveries resume at once.
        """
        deliveries = self.storage.deliveries
        await deliveries.clear_leases()
        deliverer = Deliverer(deliveries, setup.webhooks, webhook_metrics(setup.metrics))
        await deliverer.start()
        try:
            yield []
        finally:
            await deliverer.stop()


@contextlib.asynccontextmanager
async def open_sqlite_backend(
    settings: Settings,
    *,
    owner: str = "atelier serve",
    busy_timeout: float = BUSY_TIMEOUT,
    retry_for: float = RETRY_FOR,
) -> AsyncIterator[SqliteRunBackend]:
    """Own DATA_DIR, open the checkpointer and the run store in it; close them after.

    One process owns a DATA_DIR (`engine.sqlite.ownership`): its recovery restarts
    the runs it finds unfinished and not its own, so a second owner would restart the
    first one's runs. The lock is taken before anything is opened.

    Args:
        settings: The deployment's settings (`DATA_DIR`).
        owner: What this process is ("atelier serve", "atelier run"), named to a
            process refused the directory.
        busy_timeout: Seconds a write waits for another connection's lock.
        retry_for: Seconds the event writer retries a failing batch before the runs it
            carries are lost.

    Raises:
        DataDirInUse: Another process owns DATA_DIR; nothing was opened.
    """
    db = str(settings.database_path)
    with own_data_dir(settings.data_dir, owner):
        async with AsyncSqliteSaver.from_conn_string(db) as checkpointer:
            # One rule for every writer of atelier.db (see engine/sqlite/database.py): a busy
            # timeout, and writes that begin with a write. The saver keeps the second by itself
            # (each operation under its lock, each write transaction opened by its INSERT).
            await checkpointer.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            # The run store's durability, not more: in WAL mode NORMAL survives a killed
            # process (only a power cut may lose the last commits, the run store's as well),
            # where the default FULL flushes the disk on every checkpoint (~60 a run).
            await checkpointer.conn.execute("PRAGMA synchronous=NORMAL")
            await checkpointer.setup()
            hub = Hub()
            async with (
                SqliteRunStorage(
                    db, publish=hub.publish, busy_timeout=busy_timeout, retry_for=retry_for
                ) as storage,
                open_sqlite_store(
                    settings.data_dir / STORE_FILE, busy_timeout=busy_timeout
                ) as store,
            ):
                yield SqliteRunBackend(
                    storage=storage,
                    live=hub,
                    checkpointer=checkpointer,
                    checkpoints=SqliteCheckpoints(checkpointer),
                    crons=SqliteCronRepository(storage.database),
                    feedback=SqliteFeedbackRepository(storage.database),
                    store=store,
                    assistants=SqliteAssistantRepository(storage.database),
                    campaigns=SqliteCampaignRepository(storage.database),
                    ready_checks={"runs": storage.ping},
                )
