"""The run storage contract, against every backend (SQLite, PostgreSQL).

Group-committed event logs published only once committed, an atomic busy check, a
run and its new thread written together, pruning that keeps the final frames,
threads visible to their owner only, metadata search and count, metadata merged
atomically.
"""

from __future__ import annotations

import asyncio

import pytest

from engine.protocols import ThreadExists
from engine.records import Frame, RunStatusChange, ThreadStateChange
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread

#: Far in the future, as an ISO 8601 time (both backends compare it as a time).
LATER = "9999-12-31T00:00:00+00:00"


async def test_frames_are_published_only_once_committed_and_in_order(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    assert await store.runs.insert(run("r1"), exclusive=True)
    for i in range(1, 6):
        store.events.append("r1", Frame(i, "custom", f'{{"n":{i}}}'))
    assert opened.published == []  # queued, not yet committed
    await store.events.flush()
    assert [i for _, i in opened.published] == [1, 2, 3, 4, 5]
    # Another connection sees them: they are durable, not just in memory.
    assert await opened.frame_ids_elsewhere("r1") == [1, 2, 3, 4, 5]
    assert [f.id for f in await store.events.read("r1", after=2)] == [3, 4, 5]
    assert [f.data for f in await store.events.read("r1", after=4)] == ['{"n":5}']
    assert await store.events.last_id("r1") == 5
    assert await store.events.last_id("nothing") == 0


async def test_the_busy_check_admits_one_of_two_racing_runs(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    results = await asyncio.gather(
        store.runs.insert(run("a"), exclusive=True),
        store.runs.insert(run("b"), exclusive=True),
    )
    assert sorted(results) == [False, True]
    assert len(await store.runs.active("t1")) == 1
    assert await store.runs.insert(run("c"), exclusive=False)  # enqueue: admitted
    assert [r.run_id for r in await store.runs.active("t1")][-1] == "c"


async def test_a_run_and_its_new_thread_are_written_together_or_not_at_all(
    opened: Opened,
) -> None:
    store = opened.storage
    await store.threads.insert(thread("taken"))
    with pytest.raises(ThreadExists):
        await store.runs.insert(
            run("r", thread_id="taken"), new_thread=thread("taken"), exclusive=True
        )
    assert await store.runs.get("r") is None
    assert await store.runs.insert(
        run("s", thread_id="new"), new_thread=thread("new"), exclusive=True
    )
    created = await store.threads.get("alice", "new")
    assert created is not None and created.status == "busy"
    assert created.metadata == {"graph_id": "studio", "assistant_id": "studio"}


async def test_a_run_record_reads_back_as_written(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    written = run("r1")
    written.metadata = {"tag": "日本語", "n": 1}
    written.idempotency_key, written.request_hash = "key", "hash"
    await store.runs.insert(written, exclusive=True)
    read = await store.runs.get("r1")
    assert read == written
    assert await store.runs.find("alice", "t1", "r1") == written
    assert await store.runs.find("mallory", "t1", "r1") is None
    assert await store.runs.find_idempotent("alice", "key") == written
    store.events.record(
        RunStatusChange("r1", "error", attempt=2, error={"error": "E", "message": "m"}),
        run_id="r1",
    )
    store.events.record(ThreadStateChange("t1", "error", {"v": 1}, {"task": ["i"]}))
    await store.events.flush()
    ended = await store.runs.get("r1")
    assert (ended.status, ended.attempt, ended.error) == (
        "error",
        2,
        {"error": "E", "message": "m"},
    )
    assert ended.finished_at is not None
    t = await store.threads.get("alice", "t1")
    assert (t.status, t.values, t.interrupts) == ("error", {"v": 1}, {"task": ["i"]})
    assert [r.run_id for r in await store.runs.for_thread("t1")] == ["r1"]
    assert await store.runs.for_thread("t1", status="success") == []
    await store.runs.delete("r1")
    assert await store.runs.get("r1") is None


async def test_pruning_keeps_the_final_frames_so_a_rejoin_sees_a_hole(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    await store.runs.insert(run("r1"), exclusive=True)
    for i, event in enumerate(["metadata", "custom", "custom", "error", "end"], start=1):
        store.events.append("r1", Frame(i, event, "{}"))
    store.events.record(RunStatusChange("r1", "error"))
    await store.events.flush()
    assert await store.events.prune(finished_before=LATER) == 1
    assert [(f.id, f.event) for f in await store.events.read("r1", 0)] == [
        (4, "error"),
        (5, "end"),
    ]
    assert await store.events.prune(finished_before=LATER) == 0  # done once


async def test_threads_are_visible_to_their_owner_only(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread("t1", owner="alice"))
    assert await store.threads.get("alice", "t1") is not None
    assert await store.threads.get("mallory", "t1") is None
    assert await store.threads.exists("t1") and not await store.threads.exists("t2")
    assert [t.thread_id for t in await store.threads.search("mallory")] == []
    with pytest.raises(ThreadExists):
        await store.threads.insert(thread("t1", owner="mallory"))


async def test_search_filters_threads_by_metadata(opened: Opened) -> None:
    store = opened.storage
    for name, meta in [
        ("a", {"user": "u1", "n": 1}),
        ("b", {"user": "u2"}),
        ("c", {"user": "u1"}),
    ]:
        record = thread(name)
        record.metadata = meta
        await store.threads.insert(record)
    found = await store.threads.search("alice", metadata={"user": "u1"}, sort_order="asc")
    assert [t.thread_id for t in found] == ["a", "c"]
    found = await store.threads.search("alice", metadata={"user": "u1", "n": 1})
    assert [t.thread_id for t in found] == ["a"]
    found = await store.threads.search("alice", ids=["b", "c"], sort_by="thread_id")
    assert [t.thread_id for t in found] == ["c", "b"]
    assert len(await store.threads.search("alice", limit=-1)) == 3
    assert await store.threads.count("alice", metadata={"user": "u1"}) == 2
    assert await store.threads.count("alice", metadata={"user": "u1"}, status="busy") == 0
    assert await store.threads.count("alice") == 3 and await store.threads.count("bob") == 0
    merged = await store.threads.merge_metadata("alice", "b", {"user": "u1"})
    assert merged is not None and merged.metadata == {"user": "u1"}
    found = await store.threads.search("alice", metadata={"user": "u1"}, limit=2, offset=1)
    assert len(found) == 2
    await store.threads.delete("a")
    assert await store.threads.get("alice", "a") is None


async def test_concurrent_metadata_merges_into_one_thread_all_land(opened: Opened) -> None:
    # Regression: PATCH read the metadata, merged it and wrote it back: of two
    # concurrent PATCHes, one was lost.
    store = opened.storage
    record = thread("t1")
    record.metadata = {"kept": True, "n": 0}
    await store.threads.insert(record)
    merged = await asyncio.gather(
        *(store.threads.merge_metadata("alice", "t1", {f"k{i}": i, "n": i}) for i in range(20))
    )
    assert all(m is not None for m in merged)
    final = await store.threads.get("alice", "t1")
    assert final is not None
    assert {f"k{i}" for i in range(20)} | {"kept", "n"} == set(final.metadata)
    assert final.metadata["kept"] is True
    # A key set to null stays, with a null value (a merge, not a JSON merge patch).
    final = await store.threads.merge_metadata("alice", "t1", {"kept": None, "deep": {"a": 1}})
    assert final is not None and final.metadata["kept"] is None
    final = await store.threads.merge_metadata("alice", "t1", {"deep": {"b": 2}})
    assert final is not None and final.metadata["deep"] == {"b": 2}  # top-level keys only
    assert await store.threads.get("alice", "t1") == final
    assert await store.threads.merge_metadata("mallory", "t1", {"x": 1}) is None
    assert "x" not in (await store.threads.get("alice", "t1")).metadata


async def test_count_counts_in_the_database_without_loading_a_thread(
    opened: Opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = opened.storage
    for name in ("a", "b", "c"):
        await store.threads.insert(thread(name))

    def refuse(_row: object) -> None:
        raise AssertionError("count loaded a thread")

    monkeypatch.setattr("engine.sqlite.threads.thread_from_row", refuse)
    monkeypatch.setattr("engine.postgres.threads.thread_from_row", refuse)
    assert await store.threads.count("alice") == 3
