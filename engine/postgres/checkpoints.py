"""LangGraph's PostgreSQL checkpoints: a run's rollback, and writes fenced by leases.

`delete_run_checkpoints`: a `rollback` cancel deletes the checkpoints the run wrote
(their metadata names the run, see `engine.protocols.CheckpointHousekeeping`) and
their pending writes, in one transaction. `AsyncPostgresSaver` has no
`adelete_for_runs`, so `PostgresCheckpoints`, the scale-out backend's housekeeping,
deletes them here. The channel blobs those checkpoints referenced stay (they are
keyed by channel version, shared with other checkpoints; deleting the thread removes
them).

`FencedPostgresSaver` writes a checkpoint with its new channel blobs in one statement
(`PUT_CHECKPOINT`: the blobs through `unnest` in a data-modifying CTE), and a task's
pending writes in one statement (`INSERT_WRITES`, `UPSERT_WRITES`), where
`AsyncPostgresSaver` sends a statement per blob and per write; it serializes them on
the event loop instead of a thread (state values of a few KiB; the hop to a thread
cost more than the serializing). The saver's tables, what goes inline and what into
blobs, and its conflict rules are kept (`UPSERT_CHECKPOINT_BLOBS_SQL`,
`UPSERT_CHECKPOINTS_SQL`, `UPSERT_CHECKPOINT_WRITES_SQL`,
`INSERT_CHECKPOINT_WRITES_SQL`), and the last write of a special channel (an error,
an interrupt) wins as it does there; tests compare the rows with the saver's own.

Both writes are idempotent (upserts), so one that meets a lost connection (PostgreSQL
restarted; the pool hands out connections used in the last second unchecked) is tried
again on another, with a growing pause, for up to `RETRY_FOR` seconds, as the event
log retries its batches: a short outage delays a run's step instead of failing it.

It also fences: a worker holds a run under a lease, and the run's frames and
status writes are fenced by it (`engine.postgres.event_log`); its checkpoints are
fenced here. Before each checkpoint write on a thread whose run a worker of this
process holds, the lease is renewed where owner and epoch still match: afterwards no
other worker can claim the run for a whole lease, far longer than the write takes.
When the lease is lost (the worker stalled past it and another took the run), the
write is refused with `LeaseLost` and the worker is told, so a stale worker's step
never lands on a thread another worker continues.

Most checks need no round trip: a renewal confirmed by the database (the lease
keeper's, every second, or a check's own) that started at local time `t` keeps the
run ours until at least `t + lease` on the database clock, since no other worker
can claim it before it expires. So until `t + lease - VALID_MARGIN` (monotonic) a
write proceeds on that knowledge, and only after that is the lease renewed first. A
process paused between its check and its write by longer than the margin could
still write late; the same holds for a check that renews, paused for a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb

from engine.checkpoints import copy_thread_checkpoints, delete_thread_checkpoints
from engine.group_commit import RETRY_FOR
from engine.postgres.event_log import LeaseLost
from engine.postgres.pool import AsyncPool
from engine.postgres.runs import RENEW_LEASE, Lease

log = logging.getLogger(__name__)

T = TypeVar("T")

_INSERT_WRITES = (
    "INSERT INTO checkpoint_writes "
    "(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::integer[], %s::text[], %s::text[], %s::bytea[]) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
)
#: A task's writes when all are to special channels (kept at fixed, negative indices):
#: each replaces the one stored; as `AsyncPostgresSaver.UPSERT_CHECKPOINT_WRITES_SQL`.
UPSERT_WRITES = (
    _INSERT_WRITES
    + "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob"
)
#: Any other task's writes: stored once; as `AsyncPostgresSaver.INSERT_CHECKPOINT_WRITES_SQL`.
INSERT_WRITES = _INSERT_WRITES + "DO NOTHING"

#: A checkpoint and its new channel blobs, in one statement; as
#: `AsyncPostgresSaver.UPSERT_CHECKPOINT_BLOBS_SQL` (a blob is stored once per channel
#: version) followed by `UPSERT_CHECKPOINTS_SQL` (a checkpoint id written again
#: replaces its checkpoint and metadata).
PUT_CHECKPOINT = """
WITH blobs AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, b.channel, b.version, b.type, b.blob
    FROM unnest(%(channels)s::text[], %(versions)s::text[], %(types)s::text[],
                %(blobs)s::bytea[]) AS b (channel, version, type, blob)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
)
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
VALUES (%(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_id)s,
        %(checkpoint)s, %(metadata)s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata
"""

#: Seconds before a confirmed lease's earliest expiry at which a write stops relying
#: on it and renews it first (a write takes far less).
VALID_MARGIN = 2.0


async def delete_run_checkpoints(pool: AsyncPool, thread_id: str, run_id: str) -> int:
    """Delete the checkpoints (and their pending writes) a run wrote; return how many."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            "DELETE FROM checkpoint_writes w USING checkpoints c "
            "WHERE c.thread_id = %s AND c.metadata ->> 'run_id' = %s "
            "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
            "AND w.checkpoint_id = c.checkpoint_id",
            (thread_id, run_id),
        )
        cursor = await conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = %s AND metadata ->> 'run_id' = %s",
            (thread_id, run_id),
        )
        return cursor.rowcount


class PostgresCheckpoints:
    """Housekeeping of an `AsyncPostgresSaver`'s tables (a `CheckpointHousekeeping`)."""

    def __init__(self, checkpointer: AsyncPostgresSaver) -> None:
        """Keep house for `checkpointer`, on its pool."""
        self.checkpointer = checkpointer

    async def settle(self) -> bool:
        """Return False: each of the saver's writes commits on a pooled connection of its own."""
        return False

    async def delete_run(self, thread_id: str, run_id: str) -> int | None:
        """Delete the checkpoints (and their pending writes) a run wrote; return how many."""
        return await delete_run_checkpoints(self.checkpointer.conn, thread_id, run_id)  # type: ignore[arg-type]

    async def keep_latest(self, thread_id: str) -> None:
        """Delete a thread's checkpoints but the latest of each namespace (the saver's prune)."""
        await self.checkpointer.aprune([thread_id], strategy="keep_latest")

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint (subgraphs' too) and pending write of a thread."""
        await delete_thread_checkpoints(self.checkpointer, thread_id)

    async def copy_thread(self, source: str, target: str) -> None:
        """Copy every checkpoint (subgraphs' too) and pending write of a thread to another."""
        await copy_thread_checkpoints(self.checkpointer, source, target)


@dataclass(frozen=True, slots=True)
class _Held:
    lease: Lease
    on_lost: Callable[[str], None]


class CheckpointFence:
    """The leases this process's workers hold, by thread (see the module docstring)."""

    def __init__(self, pool: AsyncPool, lease_seconds: float) -> None:
        """Renew leases on `pool` for `lease_seconds`."""
        self._pool = pool
        self.lease_seconds = lease_seconds
        self._held: dict[str, _Held] = {}
        self._valid_until: dict[str, float] = {}  # run → monotonic time its lease is ours

    def confirmed(self, run_id: str, since: float) -> None:
        """Note a renewal of the run's lease the database confirmed, sent at `since`.

        Args:
            run_id: The run.
            since: `time.monotonic()` taken before the renewal was sent.
        """
        until = since + self.lease_seconds - VALID_MARGIN
        if until > self._valid_until.get(run_id, 0.0):
            self._valid_until[run_id] = until

    def hold(self, thread_id: str, lease: Lease, on_lost: Callable[[str], None]) -> None:
        """Fence the thread's checkpoint writes with a run's lease from now on."""
        self._held[thread_id] = _Held(lease, on_lost)

    def release(self, thread_id: str, run_id: str) -> None:
        """Stop fencing the thread's writes (if it still holds that run's lease)."""
        held = self._held.get(thread_id)
        if held is not None and held.lease.run_id == run_id:
            del self._held[thread_id]
        self._valid_until.pop(run_id, None)

    async def check(self, config: RunnableConfig) -> None:
        """Renew the lease of the thread's held run; raise `LeaseLost` when it is gone."""
        thread_id = str((config.get("configurable") or {}).get("thread_id", ""))
        held = self._held.get(thread_id)
        if held is None:
            return  # no run of ours: an API call's state update, a copy
        lease = held.lease
        if time.monotonic() < self._valid_until.get(lease.run_id, 0.0):
            return  # confirmed recently enough: nobody else can hold it yet
        since = time.monotonic()
        params = {
            "lease": self.lease_seconds,
            "run_id": lease.run_id,
            "owner": lease.owner,
            "epoch": lease.epoch,
        }
        for attempt in range(3):
            try:
                async with self._pool.connection() as conn:
                    row = await (await conn.execute(RENEW_LEASE, params)).fetchone()
                break
            except psycopg.errors.DeadlockDetected:  # chosen as a deadlock's victim
                if attempt == 2:
                    raise
        if row is None:
            self.release(thread_id, lease.run_id)
            held.on_lost(lease.run_id)
            raise LeaseLost(lease.run_id)
        self.confirmed(lease.run_id, since)


class FencedPostgresSaver(AsyncPostgresSaver):
    """`AsyncPostgresSaver` whose writes for runs held here are fenced by their leases."""

    def __init__(self, conn: AsyncPool, *, fence: CheckpointFence) -> None:
        """Save over the pool; check `fence` before every write."""
        super().__init__(conn=conn)
        self.fence = fence
        self._pool = conn

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """A cursor on a pooled connection of its own, without the saver's process-wide lock.

        `AsyncPostgresSaver._cursor` holds one `asyncio.Lock` for every statement the
        saver sends (`aget_tuple`, `alist`, `adelete_thread`): it guards a connection
        shared by all callers, which a pool is not. Behind that lock a process's reads
        went one at a time, each for a round trip and a hop to a thread, so under load
        runs waited seconds to load a checkpoint (150 runs in a worker: ~19 s at the
        start of the team subgraph). Here each call checks out its own connection, as
        our writes do; the rest is the library's (a transient pipeline, or a
        transaction, for `pipeline=True`).
        """
        async with self._pool.connection() as conn:
            if not pipeline:
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            else:
                batch = conn.pipeline() if self.supports_pipeline else conn.transaction()
                async with batch, conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint and its new blobs in one statement, if the run is still ours.

        What goes where is `AsyncPostgresSaver.aput`'s: primitive channel values stay
        inline in the checkpoint, the others (and delta snapshots, marked inline) go
        to blobs, of which only the channels with a new version are written.
        """
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable["checkpoint_ns"]
        inline = checkpoint.copy()
        inline["channel_values"] = values = dict(checkpoint["channel_values"])
        blob_values: dict[str, Any] = {}
        for channel, value in checkpoint["channel_values"].items():
            if isinstance(value, _DeltaSnapshot):
                blob_values[channel] = values.pop(channel)
                values[channel] = True
            elif value is not None and not isinstance(value, (str, int, float, bool)):
                blob_values[channel] = values.pop(channel)
        blobs = self._dump_blobs(
            thread_id,
            checkpoint_ns,
            blob_values,
            {k: v for k, v in new_versions.items() if k in blob_values},
        )
        columns: list[list[Any]] = [list(c) for c in zip(*blobs, strict=True)] or [[]] * 6
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "channels": columns[2],
            "versions": columns[3],
            "types": columns[4],
            "blobs": columns[5],
            "checkpoint_id": checkpoint["id"],
            "parent_id": configurable.get("checkpoint_id"),
            "checkpoint": Jsonb(inline),
            "metadata": Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
        }

        async def put() -> None:
            await self.fence.check(config)
            async with self._pool.connection() as conn:
                await conn.execute(PUT_CHECKPOINT, params)

        await self._retrying(put)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Save a task's pending writes in one statement, if the thread's run is still ours."""
        configurable = config["configurable"]
        rows = self._dump_writes(
            configurable["thread_id"],
            configurable["checkpoint_ns"],
            configurable["checkpoint_id"],
            task_id,
            task_path,
            writes,
        )
        if not rows:
            return
        if all(channel in WRITES_IDX_MAP for channel, _ in writes):
            by_index = {row[5]: row for row in rows}  # one statement upserts a key once
            statement, rows = UPSERT_WRITES, list(by_index.values())
        else:
            statement = INSERT_WRITES
        columns = [list(column) for column in zip(*rows, strict=True)]

        async def put() -> None:
            await self.fence.check(config)
            async with self._pool.connection() as conn:
                await conn.execute(statement, columns)

        await self._retrying(put)

    async def _retrying(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent write, again while it fails for a lost connection."""
        deadline = time.monotonic() + RETRY_FOR
        pause = 0.05
        while True:
            try:
                return await write()
            except psycopg.OperationalError as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("a checkpoint write failed (%s); trying again", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
