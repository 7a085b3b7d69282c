"""Workers: claim runs from the queue, execute them under a lease, hand them back.

A `RunWorker` claims pending runs (`PostgresRunRepository.claim_many`: `CLAIM_BATCH`
in a statement, twice as many in the next while claims come back full, up to
`MAX_CLAIM_BATCH`) while it has room (`concurrency`), executes each with
the ordinary `InProcessExecutor` over the fenced event log, and releases the run's
lease once the executor is done with it. It claims again when woken
(`RunSignals.wake`: a Redis message or this process's own API) and every `poll`
seconds in any case, so a lost wake-up costs at most a poll interval.

Leases: `LeaseKeeper` looks after the leases of every run the worker holds from a
thread of its own with its own connection, every `heartbeat` seconds (a second by
default): it renews each lease a third of a lease after its last renewal (or its
claim), and reads the others back (`HELD_LEASES`, which writes nothing: a renewal
writes a row version, and the database's work grows with them). A node that blocks
the event loop (CPU-bound work, a synchronous call) cannot starve the thread, so a
live run never looks dead; a stopped process (SIGSTOP, SIGKILL) stops renewing, and
the sweep (every worker runs one) hands its runs to another worker once their lease
expired. Each heartbeat reads `cancel_requested`, so a cancel whose Redis signal the
worker missed still stops the run within a heartbeat. A heartbeat that finds the
lease gone (another worker holds the run now) stops the run here without writing
anything (the executor's `lease` reason); the fenced event log refuses anything it
had queued.

A resumed run (claimed again after its lease expired, or handed back) is executed
with its stored `attempt`: the executor continues it from its own last checkpoint,
with a new `metadata` frame telling the next attempt number, its frame ids after the
log's last. A claimed run that already used RUN_MAX_ATTEMPTS executions ends with
`error` and `end` instead.

Graceful stop (`stop`): no more claims; runs in flight are cancelled without an
outcome (their checkpoints kept), their queued frames committed, and handed back to
the queue, where another worker resumes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import psycopg
from redis.asyncio import Redis

from engine.executor import InProcessExecutor
from engine.postgres import PostgresRunStorage
from engine.postgres import redis_pubsub as redis_signals
from engine.postgres.checkpoints import CheckpointFence
from engine.postgres.runs import (
    HELD_LEASES,
    RENEW_LEASES,
    Claim,
    Lease,
    leases_params,
    renew_leases_params,
)
from engine.postgres.signals import CANCEL_CHANNEL, WAKE_CHANNEL, parse_cancel
from engine.protocols import LiveFrames, StoreError
from engine.records import CancelAction, out_of_attempts

log = logging.getLogger(__name__)

#: Seconds between two claims when no wake-up came.
POLL_INTERVAL = 1.0
#: Seconds between the lease keeper's heartbeats: its checks of the runs a worker holds
#: (and their cancels), and the renewals of those leases that are due.
HEARTBEAT_INTERVAL = 1.0
#: Most runs the first claim after a wake-up takes: two idle workers woken by the same
#: burst of runs share it (each takes a few at a time).
CLAIM_BATCH = 8
#: Most runs one claim takes. While claims come back full, each asks for twice as many
#: as the last. 300 runs started at once took each of two workers ~19 claims of 8, each
#: waiting its turn on an event loop busy with the runs already claimed: the slowest
#: first frame came 6-18 s after its request, against ~5 s with the batches growing
#: (`bench/bench_scale.py --ways scale --concurrency 300 --runs 300`).
MAX_CLAIM_BATCH = 64


def next_claim_batch(batch: int, asked: int, claimed: int) -> int:
    """The most runs the next claim of a burst asks for, after `claimed` of `asked`."""
    return min(batch * 2, MAX_CLAIM_BATCH) if claimed == asked else batch


class WorkerMetrics(Protocol):
    """What a worker reports (implemented by `app.metrics.AtelierMetrics`)."""

    def run_claimed(self, seconds: float) -> None: ...
    def run_resumed(self) -> None: ...
    def lease_lost(self) -> None: ...


def worker_id() -> str:
    """Return a name for this worker that no other process has: host, pid and a nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseKeeper:
    """Renew a worker's leases from a thread with its own connection (see the module docstring).

    `on_renewal(renewed, lost, cancels, since)` is called on the event loop after each
    heartbeat: the leases renewed (those that were due), the leases found gone, the
    cancels requested by run id, and the `time.monotonic()` taken before the
    heartbeat's statements were sent.
    """

    def __init__(
        self,
        url: str,
        owner: str,
        *,
        lease_seconds: float,
        interval: float,
        loop: asyncio.AbstractEventLoop,
        on_renewal: Callable[[set[str], set[str], dict[str, CancelAction], float], None],
    ) -> None:
        """Prepare the keeper; `start()` starts its thread."""
        self._url = url
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._interval = interval
        self._loop = loop
        self._on_renewal = on_renewal
        #: Seconds after a renewal (or the claim) before a lease is renewed again.
        self.renew_after = lease_seconds / 3
        self._leases: dict[str, Lease] = {}
        self._renewed: dict[str, float] = {}  # run → monotonic time of its last renewal
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def hold(self, lease: Lease, since: float) -> None:
        """Renew this lease from now on; `since`: when the claim that set it was sent."""
        with self._lock:
            self._leases[lease.run_id] = lease
            self._renewed[lease.run_id] = since

    def release(self, run_id: str) -> None:
        """Stop renewing a run's lease."""
        with self._lock:
            self._leases.pop(run_id, None)
            self._renewed.pop(run_id, None)

    def start(self) -> None:
        """Start renewing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for the thread; idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        conn: psycopg.Connection[tuple[str, str | None]] | None = None
        while not self._stop.wait(self._interval):
            since = time.monotonic()
            with self._lock:
                leases = dict(self._leases)
                due = [
                    lease
                    for run_id, lease in leases.items()
                    if since - self._renewed.get(run_id, 0.0) >= self.renew_after
                ]
            if not leases:
                continue
            due_ids = {lease.run_id for lease in due}
            rest = [lease for lease in leases.values() if lease.run_id not in due_ids]
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self._url, autocommit=True, connect_timeout=5, application_name="lease"
                    )
                rows = []
                if due:
                    params = renew_leases_params(due, self._lease_seconds)
                    rows += conn.execute(RENEW_LEASES, params).fetchall()
                renewed = {row[0] for row in rows}
                if rest:
                    rows += conn.execute(HELD_LEASES, leases_params(rest)).fetchall()
            except psycopg.Error as exc:  # the database is away: the leases may run out
                log.warning("could not renew %d lease(s): %s", len(leases), exc)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            with self._lock:
                for run_id in renewed & self._renewed.keys():
                    self._renewed[run_id] = since
            cancels: dict[str, CancelAction] = {row[0]: row[1] for row in rows if row[1]}  # type: ignore[misc]
            lost = set(leases) - {row[0] for row in rows}
            with contextlib.suppress(RuntimeError):  # the loop is closed: we are stopping
                self._loop.call_soon_threadsafe(self._on_renewal, renewed, lost, cancels, since)
        if conn is not None:
            conn.close()


class RunWorker:
    """Claim and execute runs of the shared queue (see the module docstring)."""

    def __init__(
        self,
        *,
        storage: PostgresRunStorage,
        live: LiveFrames,
        executor: InProcessExecutor,
        database_url: str,
        redis: Redis | None,
        concurrency: int,
        max_attempts: int,
        lease_seconds: float,
        poll: float = POLL_INTERVAL,
        heartbeat: float = HEARTBEAT_INTERVAL,
        sweep_every: float | None = None,
        fence: CheckpointFence | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        """Bind the worker to the shared storage and an executor of its own.

        Args:
            storage: The PostgreSQL storage (its event log is fenced by this worker's leases).
            live: The live fan-out (for the frames the sweep writes).
            executor: Executes the claimed runs; this worker is its only caller.
            database_url: For the lease keeper's own connection.
            redis: Wake-ups and cancels arrive here (None: polling and renewals only).
            concurrency: Runs executed at once at most.
            max_attempts: RUN_MAX_ATTEMPTS.
            lease_seconds: How long a lease lasts without a renewal.
            poll: Seconds between claims when no wake-up comes.
            heartbeat: Seconds between the lease keeper's checks of the leases and their
                cancels (each lease is renewed every third of a lease).
            sweep_every: Seconds between sweeps of expired leases (default: a third of
                the lease).
            fence: Fences the checkpoint writes of the runs this worker holds (the
                executor's checkpointer must be its `FencedPostgresSaver`).
            metrics: Claim latency, resumes and lease losses.
        """
        self.owner = worker_id()
        self.storage = storage
        self.runs = storage.runs
        self.events = storage.events
        self.live = live
        self.executor = executor
        self.redis = redis
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.lease_seconds = lease_seconds
        self.poll = poll
        self.sweep_every = sweep_every if sweep_every is not None else max(0.2, lease_seconds / 3)
        self.metrics = metrics
        self.fence = fence
        self._database_url = database_url
        self._heartbeat = heartbeat
        self._held: dict[str, Lease] = {}
        self._threads: dict[str, str] = {}  # held run → its thread
        self._lost: set[str] = set()  # held runs whose lease another worker took
        self._wake = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._watchers: set[asyncio.Task[None]] = set()
        self._keeper: LeaseKeeper | None = None
        self._executor_on_lost = storage.events.on_lost

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Start renewing, sweeping, listening and claiming."""
        self.events.on_lost = self._on_lost
        self.events.on_cancel = self.cancel
        self._keeper = LeaseKeeper(
            self._database_url,
            self.owner,
            lease_seconds=self.lease_seconds,
            interval=self._heartbeat,
            loop=asyncio.get_running_loop(),
            on_renewal=self._on_renewal,
        )
        self._keeper.start()
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="worker-claim"),
            asyncio.create_task(self._sweep_loop(), name="worker-sweep"),
        ]
        if self.redis is not None:
            self._tasks.append(asyncio.create_task(self._listen(self.redis), name="worker-listen"))
        log.info("worker %s started (concurrency %d)", self.owner, self.concurrency)

    async def stop(self) -> None:
        """Stop claiming, stop the runs in flight and hand them back; idempotent."""
        if self._stopping:
            return
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await redis_signals.stop_task(task)
        held = dict(self._held)
        await self.executor.shutdown()  # cancels without an outcome, commits what is queued
        for run_id, lease in held.items():
            try:
                if await self.runs.hand_back(lease):
                    log.info("worker %s handed run %s back", self.owner, run_id)
            except Exception:  # the lease runs out instead, and the sweep hands it on
                log.exception("could not hand run %s back", run_id)
            self._release(run_id)
        if self._keeper is not None:
            await asyncio.to_thread(self._keeper.stop)
        for watcher in list(self._watchers):
            watcher.cancel()
        log.info("worker %s stopped", self.owner)

    def wake(self) -> None:
        """Claim now (a run was queued)."""
        self._wake.set()

    def cancel(self, run_id: str, action: CancelAction) -> None:
        """Cancel a run if this worker executes it."""
        if run_id in self._held:
            self.executor.cancel(run_id, action)

    @property
    def held(self) -> list[str]:
        """The ids of the runs this worker holds."""
        return list(self._held)

    # -- claiming --------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            try:
                batch = CLAIM_BATCH
                while (room := self.concurrency - len(self._held)) > 0 and not self._stopping:
                    started = time.monotonic()
                    asked = min(room, batch)
                    claims = await self.runs.claim_many(self.owner, self.lease_seconds, asked)
                    if not claims:
                        break
                    batch = next_claim_batch(batch, asked, len(claims))
                    for claim in claims:
                        if self.metrics is not None:
                            self.metrics.run_claimed(time.monotonic() - started)
                        await self._start(claim, started)
            except Exception:  # the database is away: try again after a poll
                log.exception("worker %s could not claim runs", self.owner)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll):
                    await self._wake.wait()
            self._wake.clear()

    async def _start(self, claim: Claim, since: float) -> None:
        """Execute a claimed run; `since`: when the claim was sent (its lease runs from then)."""
        run, lease = claim.run, claim.lease
        self._held[run.run_id] = lease
        self._threads[run.run_id] = run.thread_id
        self.events.hold(lease)
        if self.fence is not None:
            self.fence.hold(run.thread_id, lease, self._lose)
            self.fence.confirmed(run.run_id, since)
        assert self._keeper is not None
        self._keeper.hold(lease, since)
        next_id = claim.last_id + 1
        if out_of_attempts(run.attempt, self.max_attempts):
            try:
                await self.executor.abandon(run, next_id)
            except StoreError:
                log.error("run %s: could not record its abandonment", run.run_id)
            self._release(run.run_id)
            return
        if run.attempt > 0:
            log.info(
                "worker %s resumes run %s (attempt %d)", self.owner, run.run_id, run.attempt + 1
            )
            if self.metrics is not None:
                self.metrics.run_resumed()
        self.executor.start(run, next_id=next_id)
        if claim.cancel_requested is not None:
            self.executor.cancel(run.run_id, claim.cancel_requested)
        watcher = asyncio.create_task(self._watch(run.run_id), name=f"worker-watch-{run.run_id}")
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, run_id: str) -> None:
        await self.executor.wait(run_id)
        if not self._stopping:  # stopping: `stop` hands the run back first
            self._release(run_id)
            self._wake.set()  # room for another run

    def _release(self, run_id: str) -> None:
        self._held.pop(run_id, None)
        self._lost.discard(run_id)
        thread_id = self._threads.pop(run_id, None)
        if self.fence is not None and thread_id is not None:
            self.fence.release(thread_id, run_id)
        self.events.release(run_id)
        if self._keeper is not None:
            self._keeper.release(run_id)

    # -- leases and signals ------------------------------------------------------------

    def _on_renewal(
        self, renewed: set[str], lost: set[str], cancels: dict[str, CancelAction], since: float
    ) -> None:
        if self.fence is not None:
            for run_id in renewed:
                if run_id in self._held:
                    self.fence.confirmed(run_id, since)
        for run_id in lost:
            if not self.executor.is_finishing(run_id):  # else: it just ended, no longer running
                self._lose(run_id)
        for run_id, action in cancels.items():
            self.cancel(run_id, action)

    def _on_lost(self, run_id: str) -> None:
        """The event log gave a run's writes up: a lost lease stops it without a word."""
        if self.events.lease_lost(run_id):
            self._lose(run_id)
        elif self._executor_on_lost is not None:
            self._executor_on_lost(run_id)

    def _lose(self, run_id: str) -> None:
        if run_id not in self._held or run_id in self._lost:
            return
        self._lost.add(run_id)
        log.warning("worker %s lost the lease of run %s; stopping it here", self.owner, run_id)
        if self.metrics is not None:
            self.metrics.lease_lost()
        self.executor.cancel(run_id, "lease")

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_every)
            try:
                swept = await self.runs.sweep(self.max_attempts)
            except Exception:
                log.exception("the lease sweep failed")
                continue
            for run_id, frames in swept.abandoned.items():
                self.live.publish(run_id, frames)
            if swept.requeued:
                self._wake.set()

    async def _listen(self, client: Redis) -> None:
        async with redis_signals.Subscription(client, [WAKE_CHANNEL, CANCEL_CHANNEL]) as sub:
            while True:
                item = await sub.get(timeout=60)
                if isinstance(item, redis_signals.Gap):
                    self._wake.set()  # a wake-up may be lost; cancels come with renewals
                elif isinstance(item, redis_signals.Message):
                    if item.channel == WAKE_CHANNEL:
                        self._wake.set()
                    elif (parsed := parse_cancel(item.data)) is not None:
                        action, run_id = parsed
                        self.cancel(run_id, action)
