"""The SQLite run storage's own cases: locks, retries, lost runs (shared ones: test_storage)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from engine.protocols import StoreError
from engine.records import Frame, RunStatusChange
from engine.sqlite import SqliteRunStorage
from tests.engine.factories import run as _run
from tests.engine.factories import thread as _thread


async def test_a_write_waits_its_turn_while_a_reader_is_in_flight(tmp_path: Path) -> None:
    # Regression: reads and writes shared one connection, so `BEGIN IMMEDIATE` ran
    # while a follower's read was in flight; SQLite then skips the busy handler and
    # the event log failed with "database is locked" at once whenever another
    # connection (the checkpointer) was writing. Now the writer never holds a read.
    db = str(tmp_path / "atelier.db")
    async with SqliteRunStorage(
        db, busy_timeout=5, retry_for=0
    ) as store:  # no retry: the wait is SQLite's
        await store.threads.insert(_thread())
        await store.runs.insert(_run("r1"), exclusive=True)
        for i in range(1, 201):
            store.events.append("r1", Frame(i, "custom", "{}"))
        await store.events.flush("r1")
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer of the file holds the lock...
        reads = [asyncio.ensure_future(store.events.read("r1", 0)) for _ in range(20)]
        store.events.append(
            "r1", Frame(201, "custom", "{}")
        )  # ...while followers read and we write
        await asyncio.sleep(0.3)
        other.execute("COMMIT")
        other.close()
        await asyncio.wait_for(store.events.flush("r1"), 10)  # waited for the lock, did not fail
        assert all(len(frames) >= 200 for frames in await asyncio.gather(*reads))
        assert await store.events.last_id("r1") == 201


async def test_a_failing_batch_is_retried_then_committed(tmp_path: Path) -> None:
    published: list[int] = []
    db = str(tmp_path / "atelier.db")
    async with SqliteRunStorage(
        db,
        publish=lambda _r, frames: published.extend(f.id for f in frames),
        busy_timeout=0.05,
        retry_for=10,
    ) as store:
        await store.threads.insert(_thread())
        await store.runs.insert(_run("r1"), exclusive=True)
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # held past the busy timeout
        store.events.append("r1", Frame(1, "metadata", "{}"))
        flushed = asyncio.ensure_future(store.events.flush("r1"))
        await asyncio.sleep(0.5)
        assert not flushed.done() and published == []  # not counted committed, not published
        other.execute("COMMIT")
        other.close()
        await asyncio.wait_for(flushed, 10)
        assert published == [1]
        assert await store.events.last_id("r1") == 1


async def test_a_run_whose_writes_fail_is_lost_alone_and_loudly(tmp_path: Path) -> None:
    # Regression: the write loop counted a failed batch as committed and dropped its
    # frames silently, for every run in the batch.
    published: list[tuple[str, int]] = []
    lost: list[str] = []
    db = str(tmp_path / "atelier.db")
    async with SqliteRunStorage(
        db, publish=lambda r, frames: published.extend((r, f.id) for f in frames), retry_for=0.2
    ) as store:
        store.events.on_lost = lost.append
        await store.threads.insert(_thread())
        await store.threads.insert(_thread("t2"))
        await store.runs.insert(_run("good"), exclusive=True)
        await store.runs.insert(_run("bad", thread_id="t2"), exclusive=True)
        await store.database.execute(
            [
                (
                    "CREATE TRIGGER refuse BEFORE INSERT ON run_events WHEN NEW.run_id = 'bad' "
                    "AND NEW.id >= 2 BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END",
                    (),
                )
            ]
        )
        store.events.append("bad", Frame(1, "metadata", "{}"))
        await store.events.flush("bad")
        for i in (1, 2, 3):
            store.events.append("good", Frame(i, "custom", "{}"))
            store.events.append("bad", Frame(i + 1, "custom", "{}"))
        store.events.record(RunStatusChange("bad", "success"), run_id="bad")
        await store.events.flush("good")  # the good run is untouched by the bad one
        with pytest.raises(StoreError):
            await store.events.flush("bad")
        assert lost == ["bad"] and store.events.is_lost("bad")
        assert [i for r, i in published if r == "good"] == [1, 2, 3]
        assert [i for r, i in published if r == "bad"] == [1]  # never a lost frame
        assert await store.events.last_id("bad") == 1
        assert (await store.runs.get("bad")).status == "pending"  # its statement went too
        store.events.append("bad", Frame(9, "custom", "{}"))  # queued before reopen: void
        assert store.events.reopen("bad") == 2  # the run continues from its first lost id
        await store.database.execute([("DROP TRIGGER refuse", ())])
        store.events.append("bad", Frame(2, "error", "{}"))
        store.events.append("bad", Frame(3, "end", "{}"))
        await store.events.flush("bad")
        assert [f.id for f in await store.events.read("bad", 0)] == [1, 2, 3]
