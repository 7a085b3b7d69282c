"""Checkpoint housekeeping through LangGraph's saver API, which every saver has.

Deleting and copying a thread go through the saver's own methods; the engine
and both backends' `engine.protocols.CheckpointHousekeeping` call these. What the
saver's API lacks, each backend writes in its own tables: `engine.sqlite.checkpoints`
(settling a cancelled write, deleting a run's checkpoints) and
`engine.postgres.checkpoints` (deleting a run's checkpoints).
"""

from __future__ import annotations

from typing import Any


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
