"""LangGraph's SQLite checkpoints: settling a cancelled write, deleting a run's checkpoints.

`SqliteCheckpoints` is the embedded backend's `CheckpointHousekeeping`; it writes the
tables of `AsyncSqliteSaver` through the saver's own connection, under its lock.

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

`delete_run`: a `rollback` cancel deletes the checkpoints the run wrote, found by
the run id their metadata carries. `AsyncSqliteSaver` has no `adelete_for_runs`.

`keep_latest`: a thread pruned by its TTL or `POST /threads/prune` keeps the latest
checkpoint of each namespace with its pending writes, and loses the rest, by the
rule `AsyncPostgresSaver.aprune` follows (which `AsyncSqliteSaver` lacks): a
subgraph call's namespace (a task id after ":") goes wholly with the root
checkpoint the call started from, once that one is saved and is not the one kept.
The SQLite saver keeps channel values inside each checkpoint, so the kept head needs
nothing else.
"""

from __future__ import annotations

import contextlib
import json
import logging

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from engine.checkpoints import copy_thread_checkpoints, delete_thread_checkpoints

log = logging.getLogger(__name__)

_RUN_MATCH = "thread_id = ? AND json_extract(CAST(metadata AS TEXT), '$.run_id') = ?"


class SqliteCheckpoints:
    """Housekeeping of an `AsyncSqliteSaver`'s tables (a `CheckpointHousekeeping`)."""

    def __init__(self, checkpointer: AsyncSqliteSaver) -> None:
        """Keep house for `checkpointer`, on its connection and under its lock."""
        self.checkpointer = checkpointer

    async def settle(self) -> bool:
        """Commit a transaction a cancelled checkpoint write left open; return whether one was."""
        conn, lock = self.checkpointer.conn, self.checkpointer.lock
        async with lock:  # no write of the saver is between its execute and its commit now
            with contextlib.suppress(ValueError):  # the connection is closed: nothing to settle
                if conn.in_transaction:
                    await conn.commit()
                    return True
        return False

    async def delete_run(self, thread_id: str, run_id: str) -> int | None:
        """Delete the checkpoints (and their pending writes) a run created; return how many."""
        conn = self.checkpointer.conn
        async with self.checkpointer.lock:  # the saver's rule: one operation at a time
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

    async def keep_latest(self, thread_id: str) -> None:
        """Delete a thread's checkpoints but the latest of each namespace (see the docstring)."""
        conn = self.checkpointer.conn
        async with self.checkpointer.lock:  # the saver's rule: one operation at a time
            try:
                kept = await _kept_heads(conn, thread_id)
                if kept:
                    keys = ", ".join("(?, ?)" for _ in kept)
                    kept_params = [value for head in kept for value in head]
                    for table in ("writes", "checkpoints"):
                        await conn.execute(
                            f"DELETE FROM {table} WHERE thread_id = ? AND "
                            f"(checkpoint_ns, checkpoint_id) NOT IN (VALUES {keys})",
                            (thread_id, *kept_params),
                        )
                    # Their parents are gone: each kept checkpoint now starts the history.
                    await conn.execute(
                        "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ?",
                        (thread_id,),
                    )
                await conn.commit()
            except BaseException:
                if conn.in_transaction:
                    await conn.rollback()
                raise

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint (subgraphs' too) and pending write of a thread."""
        await delete_thread_checkpoints(self.checkpointer, thread_id)

    async def copy_thread(self, source: str, target: str) -> None:
        """Copy every checkpoint (subgraphs' too) and pending write of a thread to another."""
        await copy_thread_checkpoints(self.checkpointer, source, target)


async def _kept_heads(conn: aiosqlite.Connection, thread_id: str) -> list[tuple[str, str]]:
    """Return the (namespace, checkpoint id) a thread's `keep_latest` keeps."""
    async with conn.execute(
        "SELECT c.checkpoint_ns, c.checkpoint_id, CAST(c.metadata AS TEXT) FROM checkpoints c "
        "WHERE c.thread_id = ? AND c.checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints "
        "WHERE thread_id = c.thread_id AND checkpoint_ns = c.checkpoint_ns)",
        (thread_id,),
    ) as cursor:
        heads = list(await cursor.fetchall())
    async with conn.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
        (thread_id,),
    ) as cursor:
        saved_roots = {row[0] for row in await cursor.fetchall()}
    root_head = next((row[1] for row in heads if row[0] == ""), None)
    kept = []
    for ns, checkpoint_id, metadata in heads:
        root = (json.loads(metadata or "{}").get("parents") or {}).get("")
        call_gone = ":" in ns and root in saved_roots and root != root_head
        if not call_gone:
            kept.append((ns, checkpoint_id))
    return kept
