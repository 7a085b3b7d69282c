"""The scale-out backend a process opens: schema, pools (the product's notes and assets on
them), checkpointer, readiness."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from redis.exceptions import RedisError

from core.settings import Settings
from engine.postgres.migrations import latest_version
from engine.postgres.resources import open_backend
from knowledge.notes import KnowledgeNote
from knowledge.postgres import PostgresNoteRepository
from providers.pg_assets import PostgresAssetStore
from tests.support.servers import RedisServer


def _settings(tmp_path: Path, **values: str) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path / "data", **values)  # type: ignore[call-arg]


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "#e07a5f").save(buffer, format="PNG")
    return buffer.getvalue()


async def test_two_processes_open_one_backend_on_a_fresh_database(
    postgres_url: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, database_url=postgres_url, redis_url=redis_server.url)
    other = _settings(tmp_path / "b", database_url=postgres_url, redis_url=redis_server.url)
    async with open_backend(settings) as first, open_backend(other) as second:
        assert first.schema_version == second.schema_version == latest_version()
        assert sorted(first.ready_checks) == ["postgres", "redis"]
        for check in first.ready_checks.values():
            await check()

        # The product's stores on each process's pools share one database.
        notes = [PostgresNoteRepository(b.pool) for b in (first, second)]
        assets = [
            PostgresAssetStore(b.asset_pool, s.assets_dir)
            for b, s in ((first, settings), (second, other))
        ]
        note = await notes[0].add(KnowledgeNote.create("reference", "冷萃咖啡", "editor"))
        assert await notes[1].get(note.id) == note
        record = await assets[0].aput(_png(), meta={"slot": 1})
        assert assets[1].read_bytes(record.asset_id) == _png()
        assert record.path is not None and record.path.is_relative_to(tmp_path / "data")

        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        assert await second.checkpointer.aget_tuple(config) is None


async def test_readiness_fails_while_redis_is_down(
    postgres_url: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, database_url=postgres_url, redis_url=redis_server.url)
    async with open_backend(settings) as backend:
        redis_server.stop()
        try:
            with pytest.raises((RedisError, OSError)):
                await backend.ready_checks["redis"]()
            await backend.ready_checks["postgres"]()
        finally:
            redis_server.start()
        await backend.ready_checks["redis"]()


async def test_the_embedded_mode_has_no_backend(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="DATABASE_URL"):
        async with open_backend(_settings(tmp_path)):
            pass
