"""The run store: group-committed event logs, atomic busy check, pruning, gaps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import pytest

from app.runs.store import Frame, RunRecord, RunStore, ThreadRecord, now


def _thread(thread_id: str = "t1", owner: str = "alice") -> ThreadRecord:
    stamp = now()
    return ThreadRecord(thread_id=thread_id, owner=owner, created_at=stamp, updated_at=stamp)


def _run(run_id: str, thread_id: str = "t1", owner: str = "alice") -> RunRecord:
    stamp = now()
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        owner=owner,
        assistant_id="studio",
        status="pending",
        created_at=stamp,
        updated_at=stamp,
        kwargs={"input": {"request": "hi"}},
        multitask_strategy="reject",
    )


async def test_frames_are_published_only_once_committed_and_in_order(tmp_path: Path) -> None:
    published: list[tuple[str, list[int]]] = []
    db = str(tmp_path / "atelier.db")
    async with RunStore(
        db, publish=lambda run, frames: published.append((run, [f.id for f in frames]))
    ) as store:
        await store.insert_thread(_thread())
        assert await store.insert_run(_run("r1"), exclusive=True)
        for i in range(1, 6):
            store.append("r1", Frame(i, "custom", f'{{"n":{i}}}'))
        assert published == []  # queued, not yet committed
        await store.flush()
        assert [i for _, ids in published for i in ids] == [1, 2, 3, 4, 5]
        # Another connection sees them: they are durable, not just in memory.
        async with aiosqlite.connect(db) as other:
            rows = await (await other.execute("SELECT id FROM run_events ORDER BY id")).fetchall()
        assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
        assert [f.id for f in await store.read_events("r1", after=2)] == [3, 4, 5]
        assert await store.last_event_id("r1") == 5


async def test_the_busy_check_admits_one_of_two_racing_runs(tmp_path: Path) -> None:
    async with RunStore(str(tmp_path / "atelier.db")) as store:
        await store.insert_thread(_thread())
        results = await asyncio.gather(
            store.insert_run(_run("a"), exclusive=True), store.insert_run(_run("b"), exclusive=True)
        )
        assert sorted(results) == [False, True]
        assert len(await store.active_runs("t1")) == 1


async def test_a_run_and_its_new_thread_are_written_together_or_not_at_all(tmp_path: Path) -> None:
    async with RunStore(str(tmp_path / "atelier.db")) as store:
        await store.insert_thread(_thread("taken"))
        with pytest.raises(aiosqlite.IntegrityError):
            await store.insert_run(
                _run("r", thread_id="taken"), new_thread=_thread("taken"), exclusive=True
            )
        assert await store.get_run("r") is None


async def test_pruning_keeps_the_final_frames_so_a_rejoin_sees_a_hole(tmp_path: Path) -> None:
    async with RunStore(str(tmp_path / "atelier.db")) as store:
        await store.insert_thread(_thread())
        await store.insert_run(_run("r1"), exclusive=True)
        for i, event in enumerate(["metadata", "custom", "custom", "error", "end"], start=1):
            store.append("r1", Frame(i, event, "{}"))
        store.queue_statement(*RunStore.run_status_statement("r1", "error"))
        await store.flush()
        assert await store.prune_events(finished_before="9999") == 1
        assert [(f.id, f.event) for f in await store.read_events("r1", 0)] == [
            (4, "error"),
            (5, "end"),
        ]
        assert await store.prune_events(finished_before="9999") == 0  # done once


async def test_threads_are_visible_to_their_owner_only(tmp_path: Path) -> None:
    async with RunStore(str(tmp_path / "atelier.db")) as store:
        await store.insert_thread(_thread("t1", owner="alice"))
        assert await store.get_thread("alice", "t1") is not None
        assert await store.get_thread("mallory", "t1") is None
        assert [t.thread_id for t in await store.search_threads("mallory")] == []


async def test_search_filters_threads_by_metadata(tmp_path: Path) -> None:
    async with RunStore(str(tmp_path / "atelier.db")) as store:
        for name, meta in [
            ("a", {"user": "u1", "n": 1}),
            ("b", {"user": "u2"}),
            ("c", {"user": "u1"}),
        ]:
            thread = _thread(name)
            thread.metadata = meta
            await store.insert_thread(thread)
        found = await store.search_threads("alice", metadata={"user": "u1"}, sort_order="asc")
        assert [t.thread_id for t in found] == ["a", "c"]
        found = await store.search_threads("alice", metadata={"user": "u1", "n": 1})
        assert [t.thread_id for t in found] == ["a"]
