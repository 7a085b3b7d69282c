"""The Store scoped per API key (engine/store.py) over each backend's LangGraph store.

SQLite always; PostgreSQL on the throwaway server (tests/support/servers.py). The
semantic ranking asks the scripted OpenAI-compatible server's `/embeddings` on
loopback through the real `OpenAIEmbeddings` client.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from app.composition import KeywordRanker
from core.run_config import OWNER_KEY, run_owner
from core.settings import Settings
from engine.execution import graph_config
from engine.store import (
    EmbeddingsUnavailable,
    NoOwnerError,
    ScopedStore,
    SemanticRanker,
    query_ranker,
)
from tests.engine import factories
from tests.support.scripted_openai import ScriptedOpenAIServer

#: Topics the scripted embeddings tell apart, one axis each.
TOPICS = ("咖啡", "护肤", "旅行")


def topic_vector(text: str) -> list[float]:
    """Embed text as how often it names each topic (plus a constant, never all zero)."""
    return [float(text.count(topic)) for topic in TOPICS] + [0.1]


@pytest.fixture(params=["sqlite", "postgres"])
async def inner(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    """Yield an empty LangGraph store of each backend, as the service opens it."""
    if request.param == "sqlite":
        from engine.sqlite.store import open_sqlite_store

        async with open_sqlite_store(tmp_path / "store.db") as store:
            yield store
        return
    from engine.postgres.pool import open_pool
    from engine.postgres.store import open_postgres_store

    pool = await open_pool(request.getfixturevalue("migrated_postgres_url"), max_size=4)
    try:
        async with open_postgres_store(pool) as store:
            yield store
    finally:
        await pool.close()


@pytest.fixture
def scoped(inner: BaseStore) -> ScopedStore:
    return ScopedStore(inner, KeywordRanker())


@pytest.fixture
def embeddings_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer("unused", embedder=topic_vector) as server:
        yield server


async def test_an_item_round_trips_without_the_hidden_owner_label(scoped: ScopedStore) -> None:
    alice = scoped.for_owner("key_alice")
    await alice.aput(("brand-a", "voice"), "tone", {"text": "亲切"})

    item = await alice.aget(("brand-a", "voice"), "tone")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("brand-a", "voice"),
        "tone",
        {"text": "亲切"},
    )
    assert await alice.alist_namespaces() == [("brand-a", "voice")]
    assert [i.namespace for i in await alice.asearch(("brand-a",))] == [("brand-a", "voice")]

    await alice.adelete(("brand-a", "voice"), "tone")
    assert await alice.aget(("brand-a", "voice"), "tone") is None
    assert await alice.alist_namespaces() == []


async def test_no_namespace_reaches_another_keys_items(scoped: ScopedStore) -> None:
    alice, bob = scoped.for_owner("key_alice"), scoped.for_owner("key_bob")
    await alice.aput(("brand-a",), "secret", {"text": "甲的配方"})
    # Bob names Alice's owner id as his first label: it is his own namespace then.
    await bob.aput(("key_alice", "brand-a"), "secret", {"text": "乙的"})

    assert await bob.aget(("brand-a",), "secret") is None
    assert (await alice.aget(("brand-a",), "secret")).value == {"text": "甲的配方"}  # type: ignore[union-attr]
    assert [i.value for i in await bob.asearch(())] == [{"text": "乙的"}]
    assert [i.value for i in await bob.asearch((), query="配方")] == []
    assert await bob.alist_namespaces() == [("key_alice", "brand-a")]
    assert await bob.alist_namespaces(prefix=("*",)) == [("key_alice", "brand-a")]
    assert await bob.alist_namespaces(suffix=("brand-a",)) == [("key_alice", "brand-a")]
    assert await bob.alist_namespaces(max_depth=1) == [("key_alice",)]
    assert await alice.alist_namespaces(max_depth=1) == [("brand-a",)]


async def test_namespaces_list_by_prefix_suffix_and_depth(scoped: ScopedStore) -> None:
    alice = scoped.for_owner("key_alice")
    for namespace in (("brand-a", "voice"), ("brand-a", "facts"), ("brand-b", "voice")):
        await alice.aput(namespace, "k", {"text": "x"})

    assert await alice.alist_namespaces(prefix=("brand-a",)) == [
        ("brand-a", "facts"),
        ("brand-a", "voice"),
    ]
    assert await alice.alist_namespaces(suffix=("voice",)) == [
        ("brand-a", "voice"),
        ("brand-b", "voice"),
    ]
    assert await alice.alist_namespaces(max_depth=1) == [("brand-a",), ("brand-b",)]
    assert await alice.alist_namespaces(limit=1, offset=1) == [("brand-a", "voice")]


async def test_a_query_ranks_by_chinese_keywords_without_embeddings(scoped: ScopedStore) -> None:
    alice = scoped.for_owner("key_alice")
    await alice.aput(("brand-a",), "coffee", {"text": "手冲咖啡的冲煮比例", "kind": "fact"})
    await alice.aput(("brand-a",), "skin", {"text": "平价护肤清单", "kind": "fact"})
    await alice.aput(("brand-a",), "both", {"text": "学生党平价护肤", "kind": "voice"})

    found = await alice.asearch(("brand-a",), query="学生党平价护肤")

    # The whole query first, then a part of it; the coffee note matches nothing.
    assert [i.key for i in found] == ["both", "skin"]
    assert found[0].score is not None and found[0].score > found[1].score  # type: ignore[operator]
    filtered = await alice.asearch(("brand-a",), query="学生党平价护肤", filter={"kind": "fact"})
    assert [i.key for i in filtered] == ["skin"]
    paged = await alice.asearch(("brand-a",), query="学生党平价护肤", offset=1)
    assert [i.key for i in paged] == ["skin"]


async def test_a_query_ranks_by_meaning_with_an_embeddings_endpoint(
    inner: BaseStore, embeddings_server: ScriptedOpenAIServer
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        embeddings_base_url=embeddings_server.base_url,
        embeddings_api_key="test",
        embeddings_model="scripted",
    )
    ranker = query_ranker(settings, KeywordRanker())
    assert isinstance(ranker, SemanticRanker)
    alice = ScopedStore(inner, ranker).for_owner("key_alice")
    await alice.aput(("brand-a",), "coffee", {"text": "咖啡咖啡 拿铁"})
    await alice.aput(("brand-a",), "skin", {"text": "护肤 面霜"})
    await alice.aput(("brand-a",), "trip", {"text": "旅行 咖啡"})

    found = await alice.asearch(("brand-a",), query="咖啡")

    assert [i.key for i in found] == ["coffee", "trip", "skin"]
    assert found[0].score == pytest.approx(1.0, abs=0.01)
    embedded = sum(len(texts) for texts in embeddings_server.embedding_inputs)
    assert embedded == 4  # the query and the three items
    await alice.asearch(("brand-a",), query="护肤")
    again = sum(len(texts) for texts in embeddings_server.embedding_inputs)
    assert again == embedded + 1  # only the new query: item vectors are kept
    await alice.aput(("brand-a",), "skin", {"text": "护肤 护肤 精华"})
    assert [i.key for i in await alice.asearch(("brand-a",), query="护肤", limit=1)] == ["skin"]


async def test_a_failing_embeddings_endpoint_is_reported_as_such(scoped: ScopedStore) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        embeddings_base_url="http://127.0.0.1:9/v1",
        embeddings_timeout=2,
    )
    alice = ScopedStore(scoped._inner, query_ranker(settings, KeywordRanker())).for_owner(
        "key_alice"
    )
    await alice.aput(("brand-a",), "k", {"text": "咖啡"})

    with pytest.raises(EmbeddingsUnavailable):
        await alice.asearch(("brand-a",), query="咖啡")
    assert len(await alice.asearch(("brand-a",))) == 1  # no query: no embeddings needed


class _State(TypedDict, total=False):
    seen: list[str]


def _memory_graph(store: BaseStore) -> Any:
    """A graph whose node writes and reads `runtime.store`, as an agent would."""

    async def remember(state: _State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        await runtime.store.aput(("brand-a", "memory"), "last", {"text": "记住了"})
        found = await runtime.store.asearch(("brand-a",))
        return {"seen": [item.key for item in found]}

    builder = StateGraph(_State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    return builder.compile(store=store)


async def test_a_runs_store_is_scoped_to_the_key_that_started_it(scoped: ScopedStore) -> None:
    graph = _memory_graph(scoped)
    run = factories.run("r1", owner="key_alice")
    mallory = {"configurable": {OWNER_KEY: "key_mallory"}}  # a client's attempt
    run.options = dataclasses.replace(run.options, config=mallory)
    config = graph_config("t1", run)

    assert run_owner(config) == "key_alice"
    result = await graph.ainvoke({}, config)

    assert result["seen"] == ["last"]
    mine = await scoped.for_owner("key_alice").aget(("brand-a", "memory"), "last")
    assert mine is not None and mine.value == {"text": "记住了"}
    assert await scoped.for_owner("key_mallory").alist_namespaces() == []


async def test_a_run_without_an_owner_cannot_use_the_store(scoped: ScopedStore) -> None:
    graph = _memory_graph(scoped)

    with pytest.raises(NoOwnerError):
        await graph.ainvoke({}, {"configurable": {"thread_id": "t1"}})


async def test_owners_runs_share_nothing_even_concurrently(scoped: ScopedStore) -> None:
    import asyncio

    graph = _memory_graph(scoped)
    owners = [f"key_{i}" for i in range(4)]
    configs = [graph_config(f"t{i}", factories.run(f"r{i}", owner=o)) for i, o in enumerate(owners)]

    await asyncio.gather(*(graph.ainvoke({}, c) for c in configs))

    for owner in owners:
        assert await scoped.for_owner(owner).alist_namespaces() == [("brand-a", "memory")]
    assert sorted(map(operator.itemgetter(0), await scoped._inner.alist_namespaces())) == owners


async def test_a_synchronous_node_reads_and_writes_the_runs_store(scoped: ScopedStore) -> None:
    def remember(state: _State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(("brand-a",), "sync", {"text": "同步节点"})
        item = runtime.store.get(("brand-a",), "sync")
        return {"seen": [item.key] if item is not None else []}

    builder = StateGraph(_State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=scoped)

    result = await graph.ainvoke({}, graph_config("t1", factories.run("r1", owner="key_alice")))

    assert result["seen"] == ["sync"]
    assert await scoped.for_owner("key_alice").aget(("brand-a",), "sync") is not None
    with pytest.raises(RuntimeError, match="a-methods"):
        scoped.for_owner("key_alice").get(("brand-a",), "sync")  # on the loop itself
