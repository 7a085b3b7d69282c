"""LangGraph's checkpoints in PostgreSQL: a run's rollback, and writes fenced by leases."""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from engine.postgres import LeaseLost, PostgresRunStorage
from engine.postgres.checkpoints import CheckpointFence, FencedPostgresSaver, PostgresCheckpoints
from engine.postgres.pool import AsyncPool, open_pool
from tests.engine.factories import run, thread


class State(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", lambda state: {"seen": ["step"]})
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


def _config(thread_id: str, run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}


@pytest.fixture
async def pool(migrated_postgres_url: str) -> AsyncIterator[AsyncPool]:
    pool = await open_pool(migrated_postgres_url, max_size=4)
    yield pool
    await pool.close()


async def _checkpoints(pool: AsyncPool, thread_id: str) -> int:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread_id,)
            )
        ).fetchone()
    assert row is not None
    return int(row["n"])


async def test_a_rollback_deletes_the_checkpoints_of_its_run_only(pool: AsyncPool) -> None:
    saver = FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))
    graph = _graph(saver)
    await graph.ainvoke({"seen": ["first"]}, _config("t1", "r1"))
    kept = await _checkpoints(pool, "t1")
    await graph.ainvoke({"seen": ["second"]}, _config("t1", "r2"))
    assert await _checkpoints(pool, "t1") > kept
    added = await _checkpoints(pool, "t1") - kept
    assert await PostgresCheckpoints(saver).delete_run("t1", "r2") == added
    assert await _checkpoints(pool, "t1") == kept
    state = await graph.aget_state({"configurable": {"thread_id": "t1"}})
    assert state.values["seen"] == ["first", "step"]


async def test_a_stale_workers_checkpoint_write_is_refused(pool: AsyncPool) -> None:
    lost: list[str] = []
    fence = CheckpointFence(pool, 0.2)  # each write renews for this long
    graph = _graph(FencedPostgresSaver(pool, fence=fence))
    async with PostgresRunStorage(pool) as store:
        await store.threads.insert(thread())
        await store.runs.insert(run("r1"), exclusive=True)
        claim = await store.runs.claim("w1", 0.2)
        assert claim is not None
        fence.hold("t1", claim.lease, lost.append)
        await graph.ainvoke({"seen": ["held"]}, _config("t1", "r1"))  # within its lease
        written = await _checkpoints(pool, "t1")
        assert written > 0
        await asyncio.sleep(0.5)  # the worker stalls past its lease; another takes the run
        assert (await store.runs.sweep(max_attempts=3)).requeued == ["r1"]
        assert await store.runs.claim("w2", 30) is not None
        with pytest.raises(LeaseLost):  # (another run id: LangGraph replays a known one)
            await graph.ainvoke({"seen": ["stale"]}, _config("t1", "r1-next-step"))
        assert set(lost) == {"r1"}  # each refused write says so
        assert await _checkpoints(pool, "t1") == written  # nothing landed


async def test_a_lease_confirmed_moments_ago_needs_no_round_trip(pool: AsyncPool) -> None:
    fence = CheckpointFence(pool, 30)
    graph = _graph(FencedPostgresSaver(pool, fence=fence))
    async with PostgresRunStorage(pool) as store:
        await store.threads.insert(thread())
        await store.runs.insert(run("r1"), exclusive=True)
        claim = await store.runs.claim("w1", 30)
        assert claim is not None
        fence.hold("t1", claim.lease, lambda _run_id: None)
        fence.confirmed("r1", time.monotonic())  # as the lease keeper does every second
        async with pool.connection() as conn:  # what no worker can see within the lease
            await conn.execute("UPDATE runs SET lease_owner = 'someone else' WHERE run_id = 'r1'")
        await graph.ainvoke({"seen": ["trusted"]}, _config("t1", "r1"))  # no round trip
        fence._valid_until["r1"] = 0.0  # the confirmation is too old now
        with pytest.raises(LeaseLost):  # so the database is asked, and says no
            await graph.ainvoke({"seen": ["checked"]}, _config("t1", "r1-next-step"))


async def test_pending_writes_in_one_statement_read_back_as_the_savers_own(
    pool: AsyncPool,
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    error, interrupt = "__error__", "__interrupt__"  # LangGraph's special channels
    ours = FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))
    theirs = AsyncPostgresSaver(conn=pool)
    batches: list[tuple[str, list[tuple[str, Any]]]] = [
        ("task-a", [("seen", ["x"]), ("post", {"title": "标题", "n": 1}), ("seen", None)]),
        ("task-b", [(error, ValueError("first")), (error, ValueError("second"))]),
        ("task-c", [(interrupt, {"ask": "ok?"})]),
        ("task-a", [("seen", ["again"])]),  # stored once: the first write stays
        ("task-d", []),
    ]
    pending = []
    for thread_id, saver in (("ours", ours), ("theirs", theirs)):
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        config = await saver.aput(config, empty_checkpoint(), {}, {})
        for task_id, writes in batches:
            await saver.aput_writes(config, writes, task_id, "path")
        stored = await saver.aget_tuple(config)
        assert stored is not None
        pending.append([(t, c, repr(v)) for t, c, v in stored.pending_writes or []])
    assert pending[0] == pending[1]
    errors = [value for task, channel, value in pending[0] if channel == error]
    assert len(errors) == 1 and "second" in errors[0]  # the last write to a special channel
    assert ("task-a", "seen", "['x']") in pending[0] and len(pending[0]) == 5


async def _rows(pool: AsyncPool, thread_id: str) -> tuple[list[Any], list[Any]]:
    """The thread's checkpoints and blobs, without the thread id, in key order."""
    async with pool.connection() as conn:
        checkpoints = await (
            await conn.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata "
                "FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id",
                (thread_id,),
            )
        ).fetchall()
        blobs = await (
            await conn.execute(
                "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
                "WHERE thread_id = %s ORDER BY checkpoint_ns, channel, version",
                (thread_id,),
            )
        ).fetchall()
    return [list(r.values()) for r in checkpoints], [list(r.values()) for r in blobs]


async def test_a_checkpoint_in_one_statement_stores_the_savers_own_rows(pool: AsyncPool) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    ours = FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))
    theirs = AsyncPostgresSaver(conn=pool)
    first = empty_checkpoint()
    first["channel_values"] = {
        "request": "写一篇笔记",  # primitive: inline
        "count": 3,
        "nothing": None,
        "post": {"title": "标题", "tags": ["a", "b"]},  # blobs
        "seen": ["x"],
        "history": _DeltaSnapshot(["d1", "d2"]),  # a blob, marked inline
        "unversioned": {"kept": "inline? no: a blob without a new version is not written"},
    }
    first_versions = {"request": "1", "count": "1", "post": "1", "seen": "1", "history": "1"}
    first["channel_versions"] = dict(first_versions)
    second = empty_checkpoint()
    second["channel_values"] = {**first["channel_values"], "seen": ["x", "y"]}
    second["channel_versions"] = {**first_versions, "seen": "2"}
    ids = []
    for thread_id, saver in (("ours", ours), ("theirs", theirs)):
        root: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        config = await saver.aput(root, first, {"source": "input", "step": -1}, first_versions)
        # The blobs of `post` and `history` are stored already: written once.
        later = await saver.aput(config, second, {"source": "loop", "step": 0}, {"seen": "2"})
        await saver.aput(config, second, {"source": "loop", "step": 1}, {"seen": "2"})  # again
        sub = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "team:1"}}
        await saver.aput(sub, first, {"source": "input", "step": -1}, {})  # no blob at all
        ids.append((config, later))
    assert ids[0][0]["configurable"]["checkpoint_id"] == first["id"]
    assert ids[0][1] == {
        "configurable": {"thread_id": "ours", "checkpoint_ns": "", "checkpoint_id": second["id"]}
    }
    assert await _rows(pool, "ours") == await _rows(pool, "theirs")
    checkpoints, blobs = await _rows(pool, "ours")
    assert len(checkpoints) == 3 and [b[1:3] for b in blobs] == [
        ["history", "1"], ["post", "1"], ["seen", "1"], ["seen", "2"]
    ]  # fmt: skip
    for thread_id, saver in (("ours", ours), ("theirs", theirs)):
        stored = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
        assert stored is not None and stored.metadata["step"] == 1
        assert stored.checkpoint["channel_values"]["seen"] == ["x", "y"]
        assert stored.checkpoint["channel_values"]["post"]["title"] == "标题"


async def test_a_graph_checkpointed_by_both_savers_has_the_same_history(pool: AsyncPool) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    histories = []
    for thread_id, saver in (
        ("ours", FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))),
        ("theirs", AsyncPostgresSaver(conn=pool)),
    ):
        graph = _graph(saver)
        config = _config(thread_id, "r1")
        await graph.ainvoke({"seen": ["first"]}, config)
        await graph.ainvoke({"seen": ["second"]}, _config(thread_id, "r2"))
        histories.append(
            [
                (s.values, s.next, s.metadata and s.metadata.get("step"))
                async for s in graph.aget_state_history(config)
            ]
        )
    assert histories[0] == histories[1] and len(histories[0]) == 6
    assert histories[0][0][0] == {"seen": ["first", "step", "second", "step"]}


async def test_checkpoint_reads_do_not_wait_for_each_other(pool: AsyncPool) -> None:
    # The library's saver sends every statement of a process behind one lock: a read
    # waited for every other caller's round trip (and its hop to a thread). Over a pool
    # each read has a connection of its own, so one read while another's cursor is
    # still open goes through (behind that lock it would wait forever).
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    ours = FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))
    theirs = AsyncPostgresSaver(conn=pool)
    for saver, thread_id in ((ours, "ours"), (theirs, "theirs")):
        await _graph(saver).ainvoke({"seen": ["first"]}, _config(thread_id, "r1"))
    config: Any = {"configurable": {"thread_id": "ours"}}
    async with ours._cursor():
        async with asyncio.timeout(5):
            stored = await ours.aget_tuple(config)
        assert stored is not None and stored.checkpoint["channel_values"]["seen"][0] == "first"
        assert [c async for c in ours.alist(config)]
    async with theirs._cursor():  # the library's saver, for contrast: the read waits
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await theirs.aget_tuple({"configurable": {"thread_id": "theirs"}})
    reads = [ours.aget_tuple(config) for _ in range(8)]  # more at once than the pool holds
    assert all(t is not None for t in await asyncio.gather(*reads))


async def test_a_checkpoint_write_on_a_connection_lost_since_its_last_use_is_retried(
    migrated_postgres_url: str,
) -> None:
    # A connection used a moment ago goes out unchecked; the server ended it meanwhile
    # (a restart): the write fails on it, and is written on a new one.
    import psycopg
    from langgraph.checkpoint.base import empty_checkpoint

    pool = await open_pool(migrated_postgres_url, min_size=2, max_size=2, name="doomed")
    try:
        saver = FencedPostgresSaver(pool, fence=CheckpointFence(pool, 30))
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        config = await saver.aput(config, empty_checkpoint(), {}, {})
        async with await psycopg.AsyncConnection.connect(
            migrated_postgres_url, autocommit=True
        ) as admin:
            ended = await (
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'doomed'"
                )
            ).fetchall()
        assert len(ended) == 2
        await saver.aput_writes(config, [("seen", ["after"])], "task")
        await saver.aput(config, empty_checkpoint(), {}, {})
        stored = await saver.aget_tuple(config)
        assert stored is not None and [w[1:] for w in stored.pending_writes or []] == [
            ("seen", ["after"])
        ]
    finally:
        await pool.close()
