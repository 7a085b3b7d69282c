"""The PostgreSQL asset store: parity with the file store, and one store for every replica."""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from providers.assets import AssetStore, asset_id_for


def _image(colour: str = "#e07a5f", fmt: str = "PNG", size: tuple[int, int] = (30, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.fixture
def pools(migrated_postgres_url: str) -> Iterator[list[Any]]:
    """Yield two synchronous pools on one migrated database: two replicas."""
    from engine.postgres.pool import open_sync_pool

    opened = [open_sync_pool(migrated_postgres_url, max_size=4) for _ in range(2)]
    yield opened
    for pool in opened:
        pool.close()


def _store(pool: Any, cache: Path) -> AssetStore:
    from providers.pg_assets import PostgresAssetStore

    return PostgresAssetStore(pool, cache)


def test_put_and_get_match_the_file_store(pools: list[Any], tmp_path: Path) -> None:
    files = AssetStore(tmp_path / "files")
    postgres = _store(pools[0], tmp_path / "cache")
    data = _image(fmt="JPEG", size=(120, 160))
    meta = {"slot": 2, "prompt": "latte", "run_id": "r1"}

    expected = files.put(data, "image/png", kind="uploaded", meta=meta)
    record = postgres.put(data, "image/png", kind="uploaded", meta=meta)

    exclude = {"created_at", "path"}
    assert record.model_dump(exclude=exclude) == expected.model_dump(exclude=exclude)
    assert record.asset_id == asset_id_for(data) and record.content_type == "image/jpeg"
    again = postgres.put(data, kind="generated", meta={"slot": 9})
    assert again.model_dump() == record.model_dump()  # first metadata wins
    assert postgres.get(record.asset_id) == record
    assert postgres.read_bytes(record.asset_id) == data
    with postgres.open(record.asset_id) as handle:
        assert handle.read() == data
    missing = asset_id_for(b"never stored")
    assert postgres.get(missing) is None and postgres.path(missing) is None
    assert postgres.read_bytes(missing) is None
    with pytest.raises(ValueError):
        postgres.get("../etc/passwd")
    with pytest.raises(ValueError, match="not a readable image"):
        postgres.put(b"not an image")


def test_an_asset_put_on_one_replica_is_served_by_another(pools: list[Any], tmp_path: Path) -> None:
    first = _store(pools[0], tmp_path / "replica-a")
    second = _store(pools[1], tmp_path / "replica-b")
    data = _image("#3d405b")
    record = first.put(data, meta={"slot": 1, "prompt": "card"})

    assert not (tmp_path / "replica-b").exists()  # nothing shared on disk
    served = second.get(record.asset_id)
    assert served is not None
    assert served.model_dump() == record.model_dump()
    assert served.path == tmp_path / "replica-b" / f"{record.asset_id}.png"
    assert second.read_bytes(record.asset_id) == data
    # Cached now: the second lookup is the file store's, and a fresh store on the same
    # cache directory finds it too.
    assert _store(pools[1], tmp_path / "replica-b").get(record.asset_id) == served


def test_a_cache_file_without_its_sidecar_is_fetched_again(
    pools: list[Any], tmp_path: Path
) -> None:
    store = _store(pools[0], tmp_path / "cache")
    data = _image("#81b29a")
    record = store.put(data)
    (tmp_path / "cache" / f"{record.asset_id}.json").unlink()  # a crash between the writes
    assert store.get(record.asset_id) == record


def test_racing_puts_of_the_same_bytes_keep_one_record(pools: list[Any], tmp_path: Path) -> None:
    data = _image("#f2cc8f", size=(64, 64))
    stores = [_store(pools[i % 2], tmp_path / f"replica-{i}") for i in range(6)]
    with ThreadPoolExecutor(6) as executor:
        records = list(executor.map(lambda i: stores[i].put(data, meta={"slot": i + 1}), range(6)))
    assert len({r.model_dump_json() for r in records}) == 1
    assert all(s.read_bytes(records[0].asset_id) == data for s in stores)
