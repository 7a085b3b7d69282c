"""The run engine's storage in SQLite: the embedded default (one file in DATA_DIR).

    database.py     the writer and reader connections, write transactions, the schema
    threads.py      SqliteThreadRepository (ThreadRepository)
    runs.py         SqliteRunRepository (RunRepository)
    event_log.py    SqliteEventLog (EventLog), group-committed appends
    checkpoints.py  SqliteCheckpoints: housekeeping of LangGraph's SQLite saver
    webhooks.py     SqliteDeliveryStore: the webhook outbox (engine.webhooks.DeliveryStore)
    retention.py    SqliteRetention: the retention sweep's claims on expired threads
    assistants.py   SqliteAssistantRepository (AssistantRepository): created assistants
                    and their versions
    backend.py      open_sqlite_backend: the saver and the storage (a RunBackend)

`SqliteRunStorage` opens the three repositories and the outbox on one database file; use it as an
async context manager.
"""

from __future__ import annotations

from typing import Self

from engine.protocols import Publish
from engine.sqlite.database import BUSY_TIMEOUT, SqliteDatabase
from engine.sqlite.event_log import RETRY_FOR, SqliteEventLog
from engine.sqlite.runs import SqliteRunRepository
from engine.sqlite.threads import SqliteThreadRepository
from engine.sqlite.webhooks import SqliteDeliveryStore


class SqliteRunStorage:
    """Threads, runs and event logs in one SQLite file (a `RunStorage`)."""

    def __init__(
        self,
        path: str,
        publish: Publish | None = None,
        *,
        busy_timeout: float = BUSY_TIMEOUT,
        retry_for: float = RETRY_FOR,
    ) -> None:
        """Bind the storage to a database file; nothing is opened yet.

        Args:
            path: The SQLite file.
            publish: Called with every committed batch of a run's frames (the live fan-out).
            busy_timeout: Seconds a write waits for another connection's lock.
            retry_for: Seconds the event writer retries a failing batch before the
                runs it carries are lost.
        """
        self.path = path
        self.database = SqliteDatabase(path, busy_timeout=busy_timeout)
        self.threads = SqliteThreadRepository(self.database)
        self.runs = SqliteRunRepository(self.database)
        self.events = SqliteEventLog(self.database, publish, retry_for=retry_for)
        self.deliveries = SqliteDeliveryStore(self.database)

    async def open(self) -> Self:
        """Connect, create the tables and start the event writer."""
        await self.database.open()
        self.events.start()
        return self

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the connections; idempotent."""
        if not self.database.is_open:
            return
        await self.events.close()
        await self.database.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Run a query on the reader connection (readiness)."""
        await self.database.read("SELECT count(*) FROM runs WHERE status = 'running'")


__all__ = ["BUSY_TIMEOUT", "SqliteRunStorage"]
