"""One behaviour suite for every NoteRepository implementation."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from knowledge.notes import KnowledgeNote, NoteStatus, NoteType
from knowledge.repository import (
    DuplicateNoteError,
    InMemoryNoteRepository,
    NoteNotFoundError,
    NoteRepository,
    SqliteNoteRepository,
    VersionConflictError,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def repo(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NoteRepository]:
    """Yield an empty repository of each implementation (postgres: a throwaway server's)."""
    if request.param == "memory":
        yield InMemoryNoteRepository()
        return
    if request.param == "postgres":
        async with _postgres_pool(request.getfixturevalue("migrated_postgres_url")) as pool:
            from knowledge.postgres import PostgresNoteRepository

            yield PostgresNoteRepository(pool)
        return
    async with SqliteNoteRepository(tmp_path / "data" / "atelier.db") as sqlite_repo:
        yield sqlite_repo


@contextlib.asynccontextmanager
async def _postgres_pool(url: str) -> AsyncIterator[Any]:
    """Open the service's kind of pool on a migrated database (engine.postgres.pool)."""
    from engine.postgres.pool import open_pool

    pool = await open_pool(url, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


def make(note_id: str, type_: str = "blocker", content: str = "数据库连接失败", **extra: object):
    """Build a note with a fixed id."""
    return KnowledgeNote.model_validate(
        {"id": note_id, "type": type_, "content": content, "tags": ["database"], **extra}
    )


async def test_implementations_satisfy_the_protocol(repo: NoteRepository) -> None:
    assert isinstance(repo, NoteRepository)
    assert bool(repo)  # an empty repository must not be falsy (`notes or default`)


async def test_add_get_round_trip(repo: NoteRepository) -> None:
    note = KnowledgeNote.create("conclusion", "使用 PostgreSQL", "editor", ["数据库", "pg"])
    assert await repo.add(note) == note
    assert await repo.get(note.id) == note
    assert await repo.get("missing") is None
    with pytest.raises(DuplicateNoteError):
        await repo.add(note)
    assert await repo.count() == 1


async def test_add_many_stores_all_or_none(repo: NoteRepository) -> None:
    await repo.add(make("taken"))
    with pytest.raises(DuplicateNoteError):
        await repo.add_many([make("new1"), make("taken"), make("new2")])
    with pytest.raises(DuplicateNoteError):
        await repo.add_many([make("dup"), make("dup")])
    assert [n.id for n in await repo.list()] == ["taken"]
    added = await repo.add_many([make("x"), make("y", "reference")])
    assert [n.id for n in added] == ["x", "y"]
    assert [n.id for n in await repo.list()] == ["taken", "x", "y"]


async def test_update_bumps_version_and_checks_expected_version(repo: NoteRepository) -> None:
    note = await repo.add(make("a"))
    updated = await repo.update("a", expected_version=1, content="数据库连接超时", tags=["db"])
    assert updated.version == 2
    assert updated.content == "数据库连接超时" and updated.tags == ["db"]
    assert updated.created_at == note.created_at
    assert updated.updated_at >= note.updated_at
    assert await repo.get("a") == updated
    with pytest.raises(VersionConflictError) as conflict:
        await repo.update("a", expected_version=1, content="stale write")
    assert conflict.value.actual == 2
    with pytest.raises(NoteNotFoundError):
        await repo.update("missing", content="x")
    with pytest.raises(ValueError):
        await repo.update("a", version=9)
    with pytest.raises(ValidationError):
        await repo.update("a", content="")
    assert (await repo.get("a")) == updated  # failed updates change nothing


async def test_archive_hides_from_search_but_not_from_get(repo: NoteRepository) -> None:
    await repo.add(make("a"))
    await repo.add(make("b"))
    archived = await repo.archive("a")
    assert archived.status is NoteStatus.ARCHIVED and archived.version == 2
    assert (await repo.get("a")) == archived
    result = await repo.search("database")
    assert result.ids == ["b"]
    assert await repo.count(status="archived") == 1


async def test_list_filters_and_pages_in_insertion_order(repo: NoteRepository) -> None:
    for i in range(5):
        await repo.add(make(f"b{i}", status="approved"))
        await repo.add(make(f"r{i}", type_="reference", content=f"参考 {i}"))
    await repo.update("b0", content="moved?")  # an update keeps the note's place
    assert [n.id for n in await repo.list(limit=3)] == ["b0", "r0", "b1"]
    assert [n.id for n in await repo.list(type=NoteType.BLOCKER, offset=3)] == ["b3", "b4"]
    assert [n.id for n in await repo.list(type="reference", limit=2, offset=1)] == ["r1", "r2"]
    assert await repo.list(status=NoteStatus.PENDING_USER) == []
    assert await repo.count(type="blocker", status="approved") == 5
    with pytest.raises(ValueError):
        await repo.list(limit=-1)
    with pytest.raises(ValueError):
        await repo.list(type="nonsense")


async def test_search_ranks_limits_and_filters_approved(repo: NoteRepository) -> None:
    await repo.add(
        make("c", type_="conclusion", content="database: use PostgreSQL", status="approved")
    )
    await repo.add(make("b", content="database connection failed"))
    await repo.add(make("x", content="学生党平价护肤清单", status="approved", tags=[]))
    result = await repo.search("database")
    assert result.ids == ["b", "c"]
    assert result.scores["b"] == pytest.approx(0.9)
    assert (await repo.search("database", limit=1)).ids == ["b"]
    assert (await repo.search("database", only_approved=True)).ids == ["c"]
    assert (await repo.search("学生党平价护肤")).ids == ["x"]


async def test_concurrent_optimistic_updates_let_exactly_one_win(repo: NoteRepository) -> None:
    await repo.add(make("a"))
    outcomes = await asyncio.gather(
        *(repo.update("a", expected_version=1, content=f"写入 {i}") for i in range(5)),
        return_exceptions=True,
    )
    wins = [o for o in outcomes if isinstance(o, KnowledgeNote)]
    assert len(wins) == 1
    assert all(isinstance(o, VersionConflictError) for o in outcomes if o not in wins)
    assert (await repo.get("a")) == wins[0]


async def test_sqlite_notes_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    note = KnowledgeNote.create(
        "blocker", "禁止使用绝对化用语（最、第一、顶级）", "editor", ["合规"]
    )
    async with SqliteNoteRepository(path) as first:
        await first.add(note)
    async with SqliteNoteRepository(path) as second:
        assert await second.get(note.id) == note
        assert (await second.search("绝对化用语")).ids == [note.id]


async def test_sqlite_uses_wal_and_requires_open(tmp_path: Path) -> None:
    repo = SqliteNoteRepository(tmp_path / "wal.db")
    with pytest.raises(RuntimeError, match="open"):
        await repo.count()
    await repo.open()
    await repo.open()  # idempotent
    try:
        async with repo._db.execute("PRAGMA journal_mode") as cursor:
            row = await cursor.fetchone()
        assert row is not None and row[0] == "wal"
    finally:
        await repo.close()
        await repo.close()


async def test_postgres_notes_are_shared_between_pools(migrated_postgres_url: str) -> None:
    """Two replicas (two pools) see one vault, and optimistic locking spans them."""
    from knowledge.postgres import PostgresNoteRepository

    async with (
        _postgres_pool(migrated_postgres_url) as first_pool,
        _postgres_pool(migrated_postgres_url) as second_pool,
    ):
        first, second = PostgresNoteRepository(first_pool), PostgresNoteRepository(second_pool)
        note = await first.add(make("shared", content="禁止使用绝对化用语"))
        assert await second.get("shared") == note
        await second.update("shared", expected_version=1, tags=["合规"])
        with pytest.raises(VersionConflictError):
            await first.update("shared", expected_version=1, content="stale")
        assert (await first.search("绝对化用语")).ids == ["shared"]


async def test_postgres_refuses_nul_characters_clearly(migrated_postgres_url: str) -> None:
    from knowledge.postgres import PostgresNoteRepository

    async with _postgres_pool(migrated_postgres_url) as pool:
        repo = PostgresNoteRepository(pool)
        with pytest.raises(ValueError, match="NUL"):
            await repo.add(make("nul", content="a\x00b"))
        await repo.add(make("ok"))
        with pytest.raises(ValueError, match="NUL"):
            await repo.update("ok", content="c\x00d")
        assert await repo.count() == 1


async def _seed_scopes(repo: NoteRepository) -> None:
    """Notes of two keys in two brand namespaces and the shared one, plus an owner-less one."""
    await repo.add_many(
        [
            make("a-brand", namespace="brand-a", principal="key_a", status="approved"),
            make("a-shared", principal="key_a", status="approved"),
            make("b-brand", namespace="brand-b", principal="key_b", status="approved"),
            make("everyone", status="approved"),  # no key wrote it: every key sees it
        ]
    )


async def test_reads_keep_to_the_namespaces_and_the_key_asked_for(repo: NoteRepository) -> None:
    await _seed_scopes(repo)

    ids = [n.id for n in await repo.list(principal="key_a")]
    assert ids == ["a-brand", "a-shared", "everyone"]
    assert await repo.count(principal="key_b") == 2
    brand_a = await repo.list(namespaces=["brand-a", "shared"], principal="key_a")
    assert [n.id for n in brand_a] == ["a-brand", "a-shared", "everyone"]
    assert [n.id for n in await repo.list(namespaces=["brand-a"], principal="key_b")] == []
    assert [n.id for n in await repo.list(namespaces=["brand-b"])] == ["b-brand"]
    assert await repo.count(namespaces=[]) == 0
    # "" is no key: only the notes no key wrote (a run outside the service).
    assert [n.id for n in await repo.list(principal="")] == ["everyone"]

    found = await repo.search("数据库连接失败", namespaces=["brand-a", "shared"], principal="key_a")
    assert set(found.ids) == {"a-brand", "a-shared", "everyone"}
    assert (await repo.search("数据库连接失败", principal="key_b")).ids == ["b-brand", "everyone"]


async def test_another_keys_note_does_not_exist_for_a_key(repo: NoteRepository) -> None:
    await _seed_scopes(repo)

    assert await repo.get("b-brand", principal="key_a") is None
    assert await repo.get("b-brand", principal="key_b") is not None
    with pytest.raises(NoteNotFoundError):
        await repo.update("b-brand", principal="key_a", content="改写")
    with pytest.raises(NoteNotFoundError):
        await repo.archive("b-brand", principal="key_a")
    assert (await repo.get("b-brand")).version == 1  # type: ignore[union-attr]


async def test_an_update_moves_a_note_and_keeps_its_key(repo: NoteRepository) -> None:
    await _seed_scopes(repo)

    moved = await repo.update("a-shared", principal="key_a", namespace="brand-a")

    assert (moved.namespace, moved.principal, moved.version) == ("brand-a", "key_a", 2)
    assert await repo.get("a-shared", principal="key_a") == moved
    assert [n.id for n in await repo.list(namespaces=["shared"], principal="key_a")] == ["everyone"]


async def test_sqlite_notes_of_before_namespaces_become_shared_and_ownerless(
    tmp_path: Path,
) -> None:
    """A vault file written before namespaces gains the columns; its notes stay visible."""
    import aiosqlite

    path = tmp_path / "old.db"
    async with aiosqlite.connect(path) as conn:
        await conn.executescript(
            """
            CREATE TABLE knowledge_notes (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
                type TEXT NOT NULL, status TEXT NOT NULL, content TEXT NOT NULL,
                tags TEXT NOT NULL DEFAULT '[]', owner TEXT NOT NULL,
                version INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL
            );
            INSERT INTO knowledge_notes
                (id, type, status, content, tags, owner, version, created_at, updated_at)
            VALUES ('old', 'blocker', 'approved', '禁止绝对化用语', '[]', 'editor', 1,
                    '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00');
            """
        )
        await conn.commit()

    async with SqliteNoteRepository(path) as repo:
        old = await repo.get("old", principal="key_a")
        assert old is not None
        assert (old.namespace, old.principal) == ("shared", None)
        assert [n.id for n in await repo.list(namespaces=["shared"], principal="key_b")] == ["old"]
    async with SqliteNoteRepository(path) as again:  # reopening adds nothing twice
        assert await again.count() == 1


def test_a_note_namespace_is_checked_and_its_key_never_serialized() -> None:
    note = make("n", namespace="brand-a", principal="key_a")

    assert note.namespace == "brand-a"
    assert "principal" not in note.model_dump()
    assert "principal" not in note.model_dump_json()
    for bad in ("", "Brand", "-a", "a/b", "a" * 65):
        with pytest.raises(ValidationError):
            make("n", namespace=bad)
