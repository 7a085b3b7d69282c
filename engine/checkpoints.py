"""Checkpoint housekeeping over LangGraph's saver API, for any saver.

`SaverCheckpoints` is the `engine.protocols.CheckpointHousekeeping` of a saver the
run engine knows nothing more about: deleting and copying a thread go through the
saver's own methods (`delete_thread_checkpoints`, `copy_thread_checkpoints`, which
the run manager calls too), and a rollback uses the saver's `adelete_for_runs` where
it has one. The backends write their own tables where the saver's API falls short:
`engine.sqlite.checkpoints` (settling a cancelled write, deleting a run's
checkpoints) and `engine.postgres.checkpoints` (deleting a run's checkpoints).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


async def delete_thread_checkpoints(checkpointer: Any, thread_id: str) -> None:
    """Delete every checkpoint (subgraphs' too) and pending write of a thread."""
    await checkpointer.adelete_thread(thread_id)


async def copy_thread_checkpoints(checkpointer: Any, source: str, target: str) -> None:
    """Copy every checkpoint (subgraphs' too) and pending write of a thread to another."""
    tuples = [t async for t in checkpointer.alist({"configurable": {"thread_id": source}})]
    for item in reversed(tuples):  # oldest first: each parent exists before its child
        ns = item.config["configurable"].get("checkpoint_ns", "")
        parent_id = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        config: dict[str, Any] = {"thread_id": target, "checkpoint_ns": ns}
        if parent_id:
            config["checkpoint_id"] = parent_id
        written = await checkpointer.aput(
            {"configurable": config},
            item.checkpoint,
            item.metadata,
            dict(item.checkpoint.get("channel_versions") or {}),
        )
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in item.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await checkpointer.aput_writes(written, writes, task_id)


class SaverCheckpoints:
    """Housekeeping through the saver's own API (a `CheckpointHousekeeping`)."""

    def __init__(self, checkpointer: Any) -> None:
        """Keep house for `checkpointer`."""
        self.checkpointer = checkpointer

    async def settle(self) -> bool:
        """Return False: a saver writing through its API leaves no write open."""
        return False

    async def delete_run(self, thread_id: str, run_id: str) -> int | None:
        """Delete a run's checkpoints with the saver's `adelete_for_runs`, if it has one.

        Returns:
            None (the saver does not say how many), or 0 when it cannot delete them.
        """
        try:
            await self.checkpointer.adelete_for_runs([run_id])
        except NotImplementedError:  # e.g. InMemorySaver: the rollback keeps them
            log.warning(
                "%s cannot delete a run's checkpoints; run %s rolled back without deleting them",
                type(self.checkpointer).__name__,
                run_id,
            )
            return 0
        return None

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint (subgraphs' too) and pending write of a thread."""
        await delete_thread_checkpoints(self.checkpointer, thread_id)

    async def copy_thread(self, source: str, target: str) -> None:
        """Copy every checkpoint (subgraphs' too) and pending write of a thread to another."""
        await copy_thread_checkpoints(self.checkpointer, source, target)
