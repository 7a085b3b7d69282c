"""The runs service: create, read, cancel, wait for and follow runs.

`create` takes the `RunSpec` an adapter built, resolves its assistant, prepares it
(`engine.preparation`: every check, the multitask strategy) under the creation lock,
records it and hands it to the executor. A stream response follows a run through
this service (`engine.protocols.RunFrames`: its event log, then its live frames).
See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.assistants import Assistant
from engine.errors import Conflict, NotFound, Unavailable
from engine.protocols import StorageUnavailable, Subscription
from engine.reads import run_result
from engine.records import CancelAction, Frame, RunRecord, RunStatus
from engine.services.core import EngineCore
from engine.spec import RunSpec


class RunsService:
    """Runs, each on one of its owner's threads."""

    def __init__(self, core: EngineCore) -> None:
        """Serve runs from the engine's shared parts."""
        self._core = core

    # -- create ------------------------------------------------------------------------

    async def create(
        self,
        spec: RunSpec,
        *,
        assistant: Assistant | None = None,
        thread_metadata: Mapping[str, Any] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Record a run and start executing it.

        Args:
            spec: The request.
            assistant: The assistant to run instead of the one `spec` names resolved at
                its latest version: the engine's own services pass a created
                assistant at a pinned version, or an internal one (the judges).
            thread_metadata: More metadata for the thread a thread-less run creates.

        Returns:
            The run, and whether it was created now (False: an idempotent repeat).

        Raises:
            RunsError: NotFound (assistant, thread), Conflict (busy thread, nothing to
                resume, shutting down), Invalid, Unavailable (the database took no write),
                or QuotaExceeded (the owner's runs at once, per minute or monthly spend;
                nothing was written, no LLM was called).
        """
        core = self._core
        if core.closing:
            raise Conflict("the server is shutting down")
        if assistant is None:
            assistant = await core.resolve(spec.owner, spec.assistant_id)
        limits = await core.limits(spec.owner)
        async with core.lock:
            prepared = await core.preparation.prepare(spec, assistant)
            run = prepared.run
            if not prepared.new:
                return run, False
            if prepared.new_thread is not None and thread_metadata:
                prepared.new_thread.metadata.update(thread_metadata)
            try:
                stored = await core.runs.insert(
                    run,
                    new_thread=prepared.new_thread,
                    exclusive=not prepared.after,
                    limits=limits,  # counted with the insert, in turn with every process's
                )
            except StorageUnavailable:  # nothing was written: the client may retry
                raise Unavailable(
                    "the database cannot record runs right now (nothing was written); retry later"
                ) from None
            if not stored:  # another process took the thread in between
                busy = await core.runs.active(run.thread_id)
                other = busy[0].run_id if busy else "?"
                raise Conflict(f"thread {run.thread_id!r} is busy with run {other!r}")
            if prepared.thread_metadata:  # the title and assistant an older thread lacks
                await core.threads.merge_metadata(
                    run.owner, run.thread_id, prepared.thread_metadata
                )
            core.executor.start(run, after=prepared.after, next_id=1)
            return run, True

    # -- read --------------------------------------------------------------------------

    async def get(self, owner: str, thread_id: str, run_id: str) -> RunRecord:
        """Return the owner's run on a thread; raise NotFound."""
        run = await self._core.runs.find(owner, thread_id, run_id)
        if run is None:
            raise NotFound(f"run {run_id!r} not found on thread {thread_id!r}")
        return run

    async def owned(self, owner: str, run_id: str) -> RunRecord:
        """Return the owner's run by id alone; raise NotFound (also for another's run)."""
        run = await self._core.runs.get(run_id)
        if run is None or run.owner != owner:
            raise NotFound(f"run {run_id!r} not found")
        return run

    async def find(self, run_id: str) -> RunRecord | None:
        """Return any owner's run by id, or None: for trusted callers in this process.

        `atelier run --resume RUN_ID` finds the run a killed process left behind;
        adapters serving clients use `get`, which answers only the run's owner.
        """
        return await self._core.runs.get(run_id)

    async def for_thread(
        self,
        owner: str,
        thread_id: str,
        *,
        limit: int = 10,
        offset: int = 0,
        status: RunStatus | None = None,
    ) -> list[RunRecord]:
        """Return a thread's runs, newest first; raise NotFound for another's thread."""
        await self._core.thread(owner, thread_id)
        return await self._core.runs.for_thread(
            thread_id, limit=limit, offset=offset, status=status
        )

    async def delete(self, owner: str, thread_id: str, run_id: str) -> None:
        """Delete a finished run and its event log; an active one is a Conflict."""
        run = await self.get(owner, thread_id, run_id)
        if run.active:
            raise Conflict(f"run {run_id!r} is {run.status}; cancel it first")
        await self._core.runs.delete(run_id)

    # -- cancel, wait ------------------------------------------------------------------

    def is_active(self, run_id: str) -> bool:
        """Whether this process is executing the run."""
        return self._core.executor.is_active(run_id)

    async def cancel(self, run: RunRecord, action: CancelAction, *, wait: bool) -> RunRecord:
        """Cancel a pending or running run (`action` interrupt or rollback)."""
        executor = self._core.executor
        if not executor.is_active(run.run_id) or not run.active:
            raise Conflict(f"run {run.run_id!r} is not pending or running (status {run.status})")
        executor.cancel(run.run_id, action)
        if wait:
            await executor.wait(run.run_id)
        ended = executor.ended(run.run_id)
        return await self._core.runs.get(run.run_id) or (ended[0] if ended else run)

    def cancel_soon(self, run_id: str, action: CancelAction = "interrupt") -> None:
        """Cancel a run if it is still executing (a disconnected `on_disconnect=cancel`)."""
        self._core.executor.cancel(run_id, action)

    async def wait(self, run_id: str) -> RunRecord | None:
        """Wait until the run is no longer pending or running; return its record."""
        executor = self._core.executor
        await executor.wait(run_id)
        stored = await self._core.runs.get(run_id)
        ended = executor.ended(run_id)
        if stored is None and ended is not None:
            return ended[0]  # deleted as it ended (rollback, on_completion)
        return stored

    async def result(self, run: RunRecord) -> dict[str, Any]:
        """Return what `/wait` and `/join` answer: the thread's values after the run.

        A failed run answers `{"__error__": {"error", "message"}}`; an interrupted
        one carries its pending interrupts under `__interrupt__`.
        """
        ended = self._core.executor.ended(run.run_id)
        return await run_result(run, self._core.threads.get, ended[1] if ended else None)

    async def join(self, run_id: str) -> dict[str, Any]:
        """Wait until the run ended; return its result (`{}` when it is gone)."""
        run = await self.wait(run_id)
        return await self.result(run) if run else {}

    # -- `engine.protocols.RunFrames`: what a stream response follows --------------------

    async def read_frames(self, run_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` committed frames of a run with ids above `after`, in order."""
        return await self._core.events.read(run_id, after, limit)

    async def last_frame_id(self, run_id: str) -> int:
        """Return the id of the run's last committed frame (0 when none)."""
        return await self._core.events.last_id(run_id)

    def subscribe(self, run_id: str) -> Subscription:
        """Start following a run's live frames."""
        return self._core.live.subscribe(run_id)

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; idempotent."""
        self._core.live.unsubscribe(sub)

    def is_live(self, run_id: str) -> bool:
        """Whether the run is being executed (by any process: its followers may wait)."""
        return self._core.live.is_live(run_id)
