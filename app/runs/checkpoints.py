"""Checkpointer housekeeping the run manager needs beyond LangGraph's saver API.

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
from typing import Any

import aiosqlite


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
