"""Checkpointer housekeeping the run engine needs beyond LangGraph's saver API.

Every write to LangGraph's checkpoint tables outside the saver goes through this
module, so a second backend (PostgreSQL) adds its case here and nowhere else.

`delete_run_checkpoints`: a `rollback` cancel deletes the checkpoints the run
wrote. LangGraph copies `config["metadata"]` into every checkpoint's metadata and
the executor puts the run id there, so a run's checkpoints (subgraphs' too) are
the thread's checkpoints whose metadata names the run. The saver's own
`adelete_for_runs` is used where a saver implements it; `AsyncSqliteSaver` does
not, so its tables are written through its own connection, under its lock, and
neither does `AsyncPostgresSaver`, whose case is `engine.postgres.checkpoints`.

`settle`: LangGraph writes checkpoints from tasks that a cancelled run cancels
too. `AsyncSqliteSaver` runs each write as `execute(...)` then `commit()` on its
one connection, so a cancel landing between the two leaves that connection in an
open write transaction (measured: about one cancel in six). In WAL mode that
transaction holds the database's write lock, and every other connection to the
file — the run store's event log, the knowledge notes — waits on it until the
saver happens to write again, or fails with "database is locked" after its busy
timeout. Closed in that state, the connection can even keep the lock for the rest
of the process. The rows it holds are complete writes LangGraph meant to keep, so
`settle` commits them.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import aiosqlite

log = logging.getLogger(__name__)

_RUN_MATCH = "thread_id = ? AND json_extract(CAST(metadata AS TEXT), '$.run_id') = ?"


async def settle(checkpointer: Any) -> bool:
    """Commit a transaction a cancelled checkpoint write left open; return whether one was.

    Only `AsyncSqliteSaver` (an aiosqlite connection guarded by an asyncio lock) needs
    this; other checkpointers are left alone.
    """
    conn = getattr(checkpointer, "conn", None)
    lock = getattr(checkpointer, "lock", None)
    if not isinstance(conn, aiosqlite.Connection) or lock is None:
        return False
    async with lock:  # no write of the saver is between its execute and its commit now
        with contextlib.suppress(ValueError):  # the connection is closed: nothing to settle
            if conn.in_transaction:
                await conn.commit()
                return True
    return False


async def delete_run_checkpoints(checkpointer: Any, thread_id: str, run_id: str) -> int | None:
    """Delete the checkpoints (and their pending writes) a run created.

    Returns:
        How many checkpoints were deleted, or None when the saver does not say.
    """
    if type(checkpointer).__module__.startswith(("langgraph.checkpoint.postgres", "engine.")):
        from engine.postgres import checkpoints as postgres  # the scale-out extra's psycopg

        if isinstance(checkpointer, postgres.AsyncPostgresSaver):
            return await postgres.delete_run_checkpoints(checkpointer.conn, thread_id, run_id)  # type: ignore[arg-type]
    conn = getattr(checkpointer, "conn", None)
    lock = getattr(checkpointer, "lock", None)
    if not isinstance(conn, aiosqlite.Connection) or lock is None:
        try:
            await checkpointer.adelete_for_runs([run_id])
        except NotImplementedError:  # e.g. InMemorySaver: the rollback keeps them
            log.warning(
                "%s cannot delete a run's checkpoints; run %s rolled back without deleting them",
                type(checkpointer).__name__,
                run_id,
            )
            return 0
        return None
    async with lock:  # the saver's own rule: one operation at a time on its connection
        try:
            await conn.execute(
                "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id IN "
                f"(SELECT checkpoint_id FROM checkpoints WHERE {_RUN_MATCH})",
                (thread_id, thread_id, run_id),
            )
            cursor = await conn.execute(
                f"DELETE FROM checkpoints WHERE {_RUN_MATCH}", (thread_id, run_id)
            )
            await conn.commit()
        except aiosqlite.OperationalError:  # the saver has not created its tables
            if conn.in_transaction:
                await conn.rollback()
            log.warning("could not delete the checkpoints of run %s", run_id, exc_info=True)
            return 0
        return cursor.rowcount


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
