"""The threads service: a caller's threads, their state, history, updates and copies.

A thread's state is read from its graph's checkpoints (`engine.reads`); a state
update goes through the graph's own `aupdate_state`, refused while a run is active
on the thread. Deleting a thread cancels its runs, then deletes it with its runs,
logs and checkpoints. A thread may have a TTL (`engine.retention`), given on create
or update (the deployment's default otherwise); `prune` applies a TTL strategy to
the threads a caller names at once, as the retention sweep does to expired ones.
See docs/architecture.md and docs/retention.md.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from engine.errors import Conflict, Invalid, NotFound
from engine.frames import public_error
from engine.protocols import ThreadExists
from engine.reads import history, state, state_at, thread_values
from engine.records import (
    ThreadRecord,
    ThreadStateChange,
    ThreadStatus,
    ThreadTTL,
    TtlStrategy,
    now,
)
from engine.services.core import EngineCore

log = logging.getLogger(__name__)


class ThreadsService:
    """Threads, each owned by one API key."""

    def __init__(self, core: EngineCore) -> None:
        """Serve threads from the engine's shared parts."""
        self._core = core

    def _graph_of(self, thread: ThreadRecord) -> Any:
        """Return the graph that ran on the thread, or None when none has yet."""
        assistant = self._core.assistant_of(thread)
        return assistant.graph if assistant is not None else None

    async def create(
        self,
        owner: str,
        thread_id: str | None,
        metadata: dict[str, Any],
        *,
        if_exists: str = "raise",
        ttl: ThreadTTL | None = None,
    ) -> ThreadRecord:
        """Create a thread (a UUID unless `thread_id` is given); return it.

        Args:
            owner: The caller.
            thread_id: The id asked for, or None.
            metadata: Its metadata.
            if_exists: `do_nothing` returns the caller's thread that has the id already.
            ttl: Its TTL, counted from now (default: the deployment's, if any).

        Raises:
            Conflict: The id is taken (by another owner, or with `raise`).
        """
        thread_id = thread_id or str(uuid.uuid4())
        existing = await self._core.threads.get(owner, thread_id)
        if existing is not None and if_exists == "do_nothing":
            return existing
        stamp = now()
        ttl = ttl or self._core.default_ttl
        thread = ThreadRecord(
            thread_id=thread_id,
            owner=owner,
            created_at=stamp,
            updated_at=stamp,
            metadata=metadata,
            ttl=ttl.starting() if ttl is not None else None,
        )
        try:
            await self._core.threads.insert(thread)
        except ThreadExists:
            raise Conflict(f"thread {thread_id!r} already exists") from None
        return thread

    async def get(self, owner: str, thread_id: str) -> ThreadRecord:
        """Return the owner's thread; raise NotFound (also when another owner has it)."""
        return await self._core.thread(owner, thread_id)

    async def patch(
        self,
        owner: str,
        thread_id: str,
        metadata: dict[str, Any],
        *,
        ttl: ThreadTTL | None = None,
    ) -> ThreadRecord:
        """Merge keys into a thread's metadata (atomically: concurrent patches all land).

        With `ttl`, the thread's TTL becomes it, counted from now.
        """
        ttl = ttl.starting() if ttl is not None else None
        thread = await self._core.threads.merge_metadata(owner, thread_id, metadata, ttl)
        if thread is None:
            raise NotFound(f"thread {thread_id!r} not found")
        return thread

    async def search(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
        ids: Sequence[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[ThreadRecord]:
        """Return the owner's threads matching every given filter."""
        return await self._core.threads.search(
            owner,
            metadata=metadata,
            status=status,
            ids=ids,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )

    async def count(
        self,
        owner: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: ThreadStatus | None = None,
    ) -> int:
        """Return how many of the owner's threads match every given filter."""
        return await self._core.threads.count(owner, metadata=metadata, status=status)

    async def delete(self, owner: str, thread_id: str) -> None:
        """Cancel a thread's runs, then delete it with its runs, logs and checkpoints."""
        await self._core.thread(owner, thread_id)
        await self.remove(thread_id)

    async def remove(self, thread_id: str) -> None:
        """Cancel a thread's runs, then delete it with its runs, logs and checkpoints.

        Whoever owns it: the caller checked that it may (`delete`, `prune`, the sweep).
        """
        core = self._core
        busy = await core.runs.active(thread_id)
        await core.executor.cancel_all([r.run_id for r in busy], "interrupt")
        await core.events.flush()
        await core.threads.delete(thread_id)
        await core.checkpoints.delete_thread(thread_id)

    async def keep_latest(self, thread_id: str) -> bool:
        """Drop a thread's checkpoints but the latest of each namespace; False while it is busy.

        Its state (`state`) reads as before and a new run continues from it; its runs
        and their logs stay. False too for a thread the saver cannot prune (a graph
        with delta channels, which PostgreSQL's saver refuses).
        """
        core = self._core
        async with core.lock:  # no run is being created on it meanwhile (this process)
            if await core.runs.active(thread_id):
                return False
            try:
                await core.checkpoints.keep_latest(thread_id)
            except NotImplementedError:  # the saver cannot rebuild its graph's delta channels
                log.warning("thread %s cannot be pruned to its latest state", thread_id)
                return False
        return True

    async def prune(self, owner: str, thread_ids: Sequence[str], strategy: TtlStrategy) -> int:
        """Apply a TTL strategy to the caller's threads among `thread_ids`; return how many.

        `delete` deletes each as `delete` does (its runs cancelled first);
        `keep_latest` prunes each one's checkpoints to the latest, skipping a thread
        with an active run. Ids the caller has no thread by (another key's, unknown)
        are left alone and not counted.
        """
        pruned = 0
        for thread_id in dict.fromkeys(thread_ids):
            if await self._core.threads.get(owner, thread_id) is None:
                continue
            if strategy == "delete":
                await self.remove(thread_id)
                pruned += 1
            elif await self.keep_latest(thread_id):
                pruned += 1
        return pruned

    async def copy(self, owner: str, thread_id: str) -> ThreadRecord:
        """Copy a thread with every checkpoint (subgraphs' too) under a new id; return it.

        The runs and their event logs stay with the original (as on the Platform).
        """
        thread = await self._core.thread(owner, thread_id)
        ttl = thread.ttl
        copy = dataclasses.replace(
            thread,
            thread_id=str(uuid.uuid4()),
            created_at=now(),
            updated_at=now(),
            ttl=ThreadTTL(ttl.strategy, ttl.minutes).starting() if ttl is not None else None,
        )
        if copy.status == "busy":
            copy.status = "idle"
        await self._core.threads.insert(copy)
        await self._core.checkpoints.copy_thread(thread.thread_id, copy.thread_id)
        return copy

    # -- state ---------------------------------------------------------------------------

    async def state(self, owner: str, thread_id: str, *, subgraphs: bool = False) -> dict[str, Any]:
        """Return a thread's latest checkpointed state (empty before its first run)."""
        thread = await self._core.thread(owner, thread_id)
        return await state(self._graph_of(thread), thread_id, subgraphs=subgraphs, safe=self._safe)

    async def state_at(
        self, owner: str, thread_id: str, checkpoint: dict[str, Any], *, subgraphs: bool = False
    ) -> dict[str, Any]:
        """Return a thread's state at a checkpoint (see `engine.reads.state_at`)."""
        thread = await self._core.thread(owner, thread_id)
        return await state_at(
            self._graph_of(thread), thread_id, checkpoint, subgraphs=subgraphs, safe=self._safe
        )

    async def history(
        self,
        owner: str,
        thread_id: str,
        *,
        limit: int,
        before: str | None = None,
        metadata: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Return a thread's past states, newest first (see `engine.reads.history`)."""
        thread = await self._core.thread(owner, thread_id)
        return await history(
            self._graph_of(thread),
            thread_id,
            limit=limit,
            before=before,
            metadata=metadata,
            checkpoint=checkpoint,
            safe=self._safe,
        )

    @property
    def _safe(self) -> tuple[type[BaseException], ...]:
        return self._core.setup.public_errors

    async def update_state(
        self,
        owner: str,
        thread_id: str,
        values: Any,
        *,
        as_node: str | None,
        checkpoint: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Write a state update through the graph's own `aupdate_state`; return the new checkpoint.

        Refused while the thread has an active run (its next checkpoint would race the
        update). The thread record's values and status follow the new head.

        Raises:
            RunsError: NotFound (thread, checkpoint), Conflict (no graph ran on the
                thread yet, busy thread) or Invalid (update).
        """
        core = self._core
        thread = await core.thread(owner, thread_id)
        assistant = core.assistant_of(thread)
        if assistant is None:
            raise Conflict(f"thread {thread_id!r} has no graph yet; start a run on it first")
        preparation = core.preparation
        preparation.check_state_update(assistant, values, as_node)
        async with core.lock:
            busy = await core.runs.active(thread_id)
            if busy:
                raise Conflict(
                    f"thread {thread_id!r} is busy with run {busy[0].run_id!r}; "
                    "update its state once the run ended"
                )
            if checkpoint:
                await preparation.check_checkpoint(thread_id, checkpoint)
            if assistant.spec.check_update is not None and isinstance(values, dict):
                await preparation.check_update(
                    assistant, thread_id, values, checkpoint, field="values", goto=[]
                )
            config = preparation.at_checkpoint(thread_id, checkpoint)
            try:
                written = await assistant.graph.aupdate_state(config, values, as_node=as_node)
            except (ValueError, KeyError, TypeError) as exc:
                message = public_error(exc, self._safe)["message"]
                raise Invalid(f"values: {message}", field="values") from None
            values_now, interrupts = await thread_values(assistant, thread_id)
            status: ThreadStatus = "interrupted" if interrupts else "idle"
            core.events.record(ThreadStateChange(thread_id, status, values_now, interrupts))
            await core.events.flush()
        configurable = dict(written.get("configurable") or {})
        return {
            "thread_id": thread_id,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint_map": configurable.get("checkpoint_map"),
        }
