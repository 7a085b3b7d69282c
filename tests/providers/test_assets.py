"""Content-addressed asset store: ids, idempotency, metadata, path safety."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from providers.assets import ASSET_ID_LENGTH, AssetStore, asset_id_for, is_valid_asset_id


def _image(colour: str = "#e07a5f", fmt: str = "PNG", size: tuple[int, int] = (30, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


def test_put_is_idempotent_and_content_addressed(tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    data = _image()

    first = store.put(data, "image/png", kind="generated", meta={"slot": 1, "prompt": "p"})
    second = store.put(data, "image/png", kind="uploaded", meta={"slot": 9})

    assert first.asset_id == second.asset_id == asset_id_for(data)
    assert len(first.asset_id) == ASSET_ID_LENGTH
    assert second.kind == "generated" and second.slot == 1  # first metadata wins
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{first.asset_id}.json",
        f"{first.asset_id}.png",
    ]
    assert store.put(_image("#000000"), "image/png").asset_id != first.asset_id


def test_metadata_round_trips(tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    data = _image(size=(120, 160))
    record = store.put(data, "image/png", meta={"slot": 2, "prompt": "latte", "run_id": "r1"})

    loaded = AssetStore(tmp_path).get(record.asset_id)

    assert loaded is not None
    assert loaded.model_dump() == record.model_dump()
    assert (loaded.width, loaded.height, loaded.bytes) == (120, 160, len(data))
    assert loaded.extra == {"run_id": "r1"}
    assert loaded.url == f"/assets/{record.asset_id}"
    assert loaded.path == tmp_path / f"{record.asset_id}.png"
    assert "path" not in loaded.model_dump()
    sidecar = json.loads((tmp_path / f"{record.asset_id}.json").read_text())
    assert set(sidecar) == {
        "asset_id", "content_type", "width", "height", "bytes",
        "kind", "slot", "prompt", "created_at", "extra",
    }  # fmt: skip
    assert store.read_bytes(record.asset_id) == data
    with store.open(record.asset_id) as handle:
        assert handle.read() == data


def test_content_type_is_detected_from_the_bytes(tmp_path: Path) -> None:
    record = AssetStore(tmp_path).put(_image(fmt="JPEG"), "image/png", kind="uploaded")
    assert record.content_type == "image/jpeg"
    assert record.path is not None and record.path.suffix == ".jpg"


@pytest.mark.parametrize(
    "bad_id",
    ["../etc/passwd", "..", "", "/etc/passwd", "A" * 32, "g" * 32, "a" * 31, "a" * 33, "a/b"],
)
def test_invalid_ids_are_rejected(tmp_path: Path, bad_id: str) -> None:
    store = AssetStore(tmp_path)
    assert not is_valid_asset_id(bad_id)
    for lookup in (store.get, store.path, store.read_bytes, store.open):
        with pytest.raises(ValueError):
            lookup(bad_id)


def test_missing_asset_is_none(tmp_path: Path) -> None:
    store = AssetStore(tmp_path / "not-yet")
    missing = "0" * ASSET_ID_LENGTH
    assert store.get(missing) is None
    assert store.path(missing) is None
    assert store.read_bytes(missing) is None
    with pytest.raises(FileNotFoundError):
        store.open(missing)


def test_non_images_are_refused(tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    with pytest.raises(ValueError, match="not a readable image"):
        store.put(b"<html>hello</html>", "image/png")
    with pytest.raises(ValueError, match="empty"):
        store.put(b"", "image/png")
    assert not any(tmp_path.iterdir())


async def test_aput_stores_in_a_thread(tmp_path: Path) -> None:
    record = await AssetStore(tmp_path).aput(_image(), "image/png", meta={"slot": 3})
    assert record.slot == 3
    assert record.path is not None and record.path.is_file()
