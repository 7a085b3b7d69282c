"""What every service of the engine shares: the storage, the executor, the assistants.

`EngineCore` holds one backend's repositories and live fan-out, the executor runs
get, the served assistants, the run preparation and the creation lock (a busy check
and a multitask strategy must not interleave with another creation). It also owns
the engine's lifecycle: entering it prunes old event logs and recovers the runs a
previous process left behind (then every `RECOVERY_INTERVAL` seconds, where the
backend leaves recovery to this process); leaving it stops the runs in flight
without an outcome, for the next start to resume. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Self

from engine.assistants import Assistant, AssistantRecord
from engine.errors import NotFound
from engine.preparation import RunPreparer
from engine.protocols import ExecutorSetup, RunBackend, RunExecutor, StoreError
from engine.quotas import UNLIMITED, LimitsFor, fixed_limits
from engine.records import ThreadRecord, ThreadTTL, out_of_attempts
from engine.repositories import AssistantRepository

log = logging.getLogger(__name__)

#: Seconds between sweeps for runs this process left without an outcome.
RECOVERY_INTERVAL = 5.0


class EngineCore:
    """One backend's parts, the executor and the served assistants (see the module docstring)."""

    def __init__(
        self,
        *,
        backend: RunBackend,
        setup: ExecutorSetup,
        created: AssistantRepository,
        max_attempts: int,
        event_retention_hours: float = 0,
        recovery_interval: float = RECOVERY_INTERVAL,
        limits: LimitsFor | None = None,
        default_ttl: ThreadTTL | None = None,
    ) -> None:
        """Bind the core to a backend, and take the executor it gives for `setup`.

        Args:
            backend: Storage, live frames and checkpoints, and the executor runs get.
            setup: The graphs served, their context and the limits runs execute with.
            created: The assistants callers created (a run may name one).
            max_attempts: RUN_MAX_ATTEMPTS.
            event_retention_hours: EVENT_RETENTION_HOURS (0: event logs are kept).
            recovery_interval: Seconds between recovery sweeps, where the backend
                leaves recovery to this process (0: none).
            limits: Each owner's quotas (`engine.quotas`); None: unlimited.
            default_ttl: The TTL of a thread created without one (`engine.retention`).
        """
        self.backend = backend
        self.storage = backend.storage
        self.threads = backend.storage.threads
        self.runs = backend.storage.runs
        self.events = backend.storage.events
        self.live = backend.live
        self.checkpointer = backend.checkpointer
        self.checkpoints = backend.checkpoints
        self.setup = setup
        #: The built-in assistants clients reach, by id.
        self.builtins: Mapping[str, Assistant] = {
            k: a for k, a in setup.assistants.items() if not a.spec.internal
        }
        #: The internal ones (`AssistantSpec.internal`), which only the engine's services run.
        self.internal: Mapping[str, Assistant] = {
            k: a for k, a in setup.assistants.items() if a.spec.internal
        }
        self.created = created
        self.max_attempts = max_attempts
        self.event_retention_hours = event_retention_hours
        #: The TTL a new thread gets when it is given none (None: kept until deleted).
        self.default_ttl = default_ttl
        self.recovery_interval = recovery_interval if backend.recovers_runs else 0
        self.executor: RunExecutor = backend.executor(setup)
        self.preparation = RunPreparer(
            storage=self.storage,
            executor=self.executor,
            checkpointer=self.checkpointer,
            webhooks=setup.webhooks,
            tracing=setup.tracing,
            default_ttl=default_ttl,
        )
        #: Returns an owner's limits, checked where runs, crons and assistants are created.
        self.limits: LimitsFor = limits or fixed_limits(UNLIMITED)
        #: Serialises run creation (busy checks, strategies) and recovery.
        self.lock = asyncio.Lock()
        self.closing = False
        self._sweeper: asyncio.Task[None] | None = None

    # -- lookups every service makes ---------------------------------------------------

    async def thread(self, owner: str, thread_id: str) -> ThreadRecord:
        """Return the owner's thread; raise NotFound (also when another owner has it)."""
        thread = await self.threads.get(owner, thread_id)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        return thread

    def assistant_of(self, thread: ThreadRecord) -> Assistant | None:
        """Return the assistant whose graph ran on the thread, or None when none has yet."""
        graph_id = str(thread.metadata.get("graph_id", ""))
        return self.builtins.get(graph_id) or self.internal.get(graph_id)

    async def resolve(self, owner: str, assistant_id: str) -> Assistant:
        """Return a built-in assistant, or the owner's created one at its latest version.

        Raises:
            NotFound: Neither (also when another owner created it).
        """
        builtin = self.builtins.get(assistant_id)
        if builtin is not None:
            return builtin
        record = await self.created.get(owner, assistant_id)
        if record is None:
            known = ", ".join(sorted(self.builtins)) or "none"
            raise NotFound(
                f"assistant {assistant_id!r} not found; the built-in ones are: {known}",
                field="assistant_id",
            )
        return self.served(record)

    def served(self, record: AssistantRecord) -> Assistant:
        """Return the graph of a created assistant, served as that assistant.

        Raises:
            NotFound: This server no longer serves its graph.
        """
        builtin = self.builtins.get(record.graph_id)
        if builtin is None:
            raise NotFound(
                f"assistant {record.assistant_id!r} runs graph {record.graph_id!r}, "
                "which this server does not serve",
                field="assistant_id",
            )
        return builtin.with_record(record)

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.prune_events()
        await self.recover()
        if self.recovery_interval > 0:
            self._sweeper = asyncio.create_task(self._sweep(), name="run-recovery-sweep")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop every run in flight without recording an outcome (a restart resumes them)."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.executor.shutdown()

    async def recover(self) -> int:
        """Start the runs left pending or running that this process is not executing.

        At start-up these are the runs a previous process left behind; later (the
        sweep) the runs this process stopped without an outcome because the database
        took no writes. Each is started again under its run id, from its thread's last
        checkpoint when that is its own, with `attempt` + 1; one out of attempts
        (RUN_MAX_ATTEMPTS) is ended with `RunAbandoned`. Returns how many were started.
        """
        resumed = 0
        async with self.lock:  # no run is between its insert and its start meanwhile
            if self.closing:
                return 0
            tails: dict[str, str] = {}  # thread → last run started, to keep threads in order
            for run in await self.runs.active():
                if self.executor.is_active(run.run_id):
                    continue
                self.events.reopen(run.run_id)  # what it queued before is void: start afresh
                next_id = await self.events.last_id(run.run_id) + 1
                if out_of_attempts(run.attempt, self.max_attempts):
                    try:
                        await self.executor.abandon(run, next_id)
                    except StoreError:
                        log.error("run %s: could not record its abandonment yet", run.run_id)
                    continue
                after = [tails[run.thread_id]] if run.thread_id in tails else []
                after += self.executor.active_on(run.thread_id)
                self.executor.start(run, after=after, next_id=next_id)
                tails[run.thread_id] = run.run_id
                resumed += 1
                log.info("resuming run %s (attempt %d)", run.run_id, run.attempt + 1)
        return resumed

    async def _sweep(self) -> None:
        """Every `recovery_interval` seconds, start the runs left without an outcome."""
        while True:
            await asyncio.sleep(self.recovery_interval)
            try:
                await self.recover()
            except Exception:  # the database is unreadable now: try again next time
                log.exception("the run recovery sweep failed")

    async def prune_events(self) -> int:
        """Prune the event logs of runs finished longer ago than EVENT_RETENTION_HOURS."""
        if self.event_retention_hours <= 0:
            return 0
        cutoff = datetime.now(UTC) - timedelta(hours=self.event_retention_hours)
        return await self.events.prune(cutoff.isoformat())
