"""Assistants clients create, in each backend's repository: one contract, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from engine.assistants import AssistantRecord
from engine.repositories import AssistantExists, AssistantRepository
from tests.engine.conftest import Opened

T0 = "2026-03-02T09:00:00+00:00"
T1 = "2026-03-02T10:00:00+00:00"
T2 = "2026-03-02T11:00:00+00:00"


def assistants_of(opened: Opened) -> AssistantRepository:
    """Return the assistant repository on the storage's database."""
    if opened.where.startswith("postgresql://"):
        from engine.postgres.assistants import PostgresAssistantRepository

        return PostgresAssistantRepository(opened.storage.pool)
    from engine.sqlite.assistants import SqliteAssistantRepository

    return SqliteAssistantRepository(opened.storage.database)


def record(assistant_id: str = "a1", owner: str = "alice", **fields: object) -> AssistantRecord:
    values: dict[str, object] = {
        "assistant_id": assistant_id,
        "owner": owner,
        "graph_id": "atelier",
        "version": 1,
        "name": "青禾",
        "description": None,
        "config": {"configurable": {"k": 1}},
        "context": {"voice": "亲切"},
        "metadata": {"brand": "qinghe"},
        "created_at": T0,
        "updated_at": T0,
        **fields,
    }
    return AssistantRecord(**values)  # type: ignore[arg-type]


async def test_an_assistant_is_its_owners_alone(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record())
    got = await repo.get("alice", "a1")
    assert got is not None and got.to_json() == record().to_json()
    assert await repo.get("bob", "a1") is None
    assert await repo.update("bob", "a1", {"name": "x"}, T1) is None
    assert await repo.set_latest("bob", "a1", 1) is None
    assert await repo.versions("bob", "a1") == []
    assert await repo.search("bob") == [] and await repo.count("bob") == 0
    assert not await repo.delete("bob", "a1")
    with pytest.raises(AssistantExists):
        await repo.insert(record(owner="bob"))  # an id is taken for every owner


async def test_an_update_is_a_new_version_and_old_ones_stay(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record())
    second = await repo.update("alice", "a1", {"context": {"voice": "克制"}}, T1)
    assert second is not None and second.version == 2 and second.context == {"voice": "克制"}
    assert second.name == "青禾" and second.created_at == T0 and second.updated_at == T1
    latest = await repo.get("alice", "a1")
    assert latest is not None and latest.version == 2
    first = await repo.get("alice", "a1", version=1)
    assert first is not None and first.context == {"voice": "亲切"}
    assert [v.version for v in await repo.versions("alice", "a1")] == [2, 1]
    assert [v.version for v in await repo.versions("alice", "a1", limit=1, offset=1)] == [1]


async def test_set_latest_picks_the_version_runs_use(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record())
    await repo.update("alice", "a1", {"metadata": {"brand": "qinghe", "v": 2}}, T1)
    back = await repo.set_latest("alice", "a1", 1)
    assert back is not None and back.version == 1
    latest = await repo.get("alice", "a1")
    assert latest is not None and latest.version == 1 and latest.context == {"voice": "亲切"}
    assert await repo.set_latest("alice", "a1", 7) is None
    # The next update is numbered after every version, not after the latest.
    third = await repo.update("alice", "a1", {"name": "三"}, T2)
    assert third is not None and third.version == 3 and third.context == {"voice": "亲切"}
    assert [v.version for v in await repo.versions("alice", "a1", metadata={"v": 2})] == [2]


async def test_concurrent_updates_get_one_number_each(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record())
    made = await asyncio.gather(
        *(repo.update("alice", "a1", {"name": f"n{i}"}, T1) for i in range(5))
    )
    assert sorted(m.version for m in made if m is not None) == [2, 3, 4, 5, 6]


async def test_search_and_count_match_the_latest_version(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record("a1"))
    await repo.insert(record("a2", name="咖啡", metadata={"brand": "beans"}, created_at=T1))
    await repo.insert(record("a3", graph_id="team", metadata={}, created_at=T2))
    await repo.insert(record("b1", owner="bob"))
    assert [a.assistant_id for a in await repo.search("alice")] == ["a3", "a2", "a1"]
    found = await repo.search("alice", metadata={"brand": "beans"})
    assert [a.assistant_id for a in found] == ["a2"]
    assert [a.assistant_id for a in await repo.search("alice", graph_id="team")] == ["a3"]
    assert [a.assistant_id for a in await repo.search("alice", name="咖啡")] == ["a2"]
    ordered = await repo.search("alice", sort_by="assistant_id", sort_order="asc", limit=2)
    assert [a.assistant_id for a in ordered] == ["a1", "a2"]
    assert await repo.count("alice") == 3
    assert await repo.count("alice", graph_id="atelier", metadata={"brand": "qinghe"}) == 1
    await repo.update("alice", "a1", {"metadata": {"brand": "gone"}}, T1)
    assert await repo.count("alice", metadata={"brand": "qinghe"}) == 0  # latest version only


async def test_delete_takes_every_version(opened: Opened) -> None:
    repo = assistants_of(opened)
    await repo.insert(record())
    await repo.update("alice", "a1", {"name": "二"}, T1)
    assert await repo.delete("alice", "a1")
    assert await repo.get("alice", "a1") is None
    assert await repo.get("alice", "a1", version=1) is None
    assert not await repo.delete("alice", "a1")
    await repo.insert(record(owner="bob"))  # the id is free again
    assert [v.version for v in await repo.versions("bob", "a1")] == [1]
