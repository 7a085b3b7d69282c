"""Assets over HTTP: serving images and uploading reference images (app/routes/assets.py)."""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

import app.routes.assets as assets_route
from app.main import create_app
from core.settings import Settings
from providers.assets import AssetStore, asset_id_for

KEY = "assets-key-0123456789abc"


#: An endpoint nothing listens on: the app's lifespan then skips the embedded model,
#: and nothing in these tests calls an LLM.
NO_LLM = "http://127.0.0.1:9/v1"


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Return settings for an app with its data under tmp_path and no embedded model."""
    return Settings(data_dir=tmp_path / "data", llm_base_url=NO_LLM, **overrides)


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (30, 40), colour: str = "#e07a5f"
) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


def noise_png(side: int) -> bytes:
    """A PNG that does not compress: about 3 bytes per pixel."""
    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(tmp_path))) as client:
        yield client


def upload(client: TestClient, data: bytes, name: str = "ref.png", mime: str = "image/png"):  # type: ignore[no-untyped-def]
    return client.post("/assets", files={"file": (name, data, mime)})


def test_an_uploaded_png_is_served_back_byte_for_byte(client: TestClient) -> None:
    data = image_bytes(size=(60, 80))

    response = upload(client, data)

    assert response.status_code == 201
    body = response.json()
    assert body == {
        "asset_id": asset_id_for(data),
        "url": f"/assets/{asset_id_for(data)}",
        "content_type": "image/png",
        "width": 60,
        "height": 80,
        "bytes": len(data),
    }
    served = client.get(body["url"])
    assert served.status_code == 200
    assert served.content == data
    assert served.headers["content-type"] == "image/png"
    assert served.headers["etag"] == f'"{body["asset_id"]}"'
    assert "immutable" in served.headers["cache-control"]
    assert served.headers["x-content-type-options"] == "nosniff"


def test_a_cached_copy_gets_304(client: TestClient) -> None:
    data = image_bytes()
    url = upload(client, data).json()["url"]

    response = client.get(url, headers={"If-None-Match": f'"{asset_id_for(data)}"'})

    assert response.status_code == 304
    assert response.content == b""


def test_head_serves_headers_only(client: TestClient) -> None:
    url = upload(client, image_bytes()).json()["url"]

    response = client.head(url)

    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content == b""


def test_the_same_bytes_twice_are_one_asset(client: TestClient) -> None:
    data = image_bytes()

    first, second = upload(client, data), upload(client, data, name="again.png")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["asset_id"] == second.json()["asset_id"]


def test_base64_json_uploads_and_data_urls(client: TestClient) -> None:
    jpeg = image_bytes("JPEG", size=(32, 24))
    webp = image_bytes("WEBP", size=(16, 16))

    as_base64 = client.post("/assets", json={"data": base64.b64encode(jpeg).decode()})
    as_data_url = client.post(
        "/assets",
        json={
            "data": "data:image/webp;base64," + base64.b64encode(webp).decode(),
            "filename": "mood.webp",
        },
    )

    assert as_base64.status_code == as_data_url.status_code == 201
    assert as_base64.json()["content_type"] == "image/jpeg"
    assert (as_base64.json()["width"], as_base64.json()["height"]) == (32, 24)
    assert as_data_url.json()["content_type"] == "image/webp"
    assert client.get(as_base64.json()["url"]).content == jpeg


def test_the_type_is_detected_not_trusted(client: TestClient) -> None:
    jpeg = image_bytes("JPEG")

    response = upload(client, jpeg, name="lies.png", mime="image/png")

    assert response.status_code == 201
    assert response.json()["content_type"] == "image/jpeg"
    assert client.get(response.json()["url"]).headers["content-type"] == "image/jpeg"


@pytest.mark.parametrize(
    "data",
    [
        b"this is not an image, whatever the name says",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,  # a PNG signature and nothing behind it
        image_bytes()[:-40],  # truncated: the header is fine, the pixels are not
        image_bytes("GIF"),  # a real image, of a type uploads do not take
        image_bytes("BMP"),
    ],
    ids=["text", "signature-only", "truncated", "gif", "bmp"],
)
def test_files_that_are_not_png_jpeg_or_webp_are_415(client: TestClient, data: bytes) -> None:
    response = upload(client, data, name="fake.png", mime="image/png")

    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert "PNG, JPEG or WEBP" in response.json()["message"]
    assets_dir = client.app.state.settings.assets_dir  # type: ignore[attr-defined]
    assert not assets_dir.exists() or not any(assets_dir.iterdir())  # nothing stored


def test_an_image_over_the_upload_limit_is_413(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_upload_bytes=20_000)
    big = noise_png(120)  # ~43 KB
    assert len(big) > 20_000

    with TestClient(create_app(settings)) as client:
        as_file = upload(client, big)
        as_base64 = client.post("/assets", json={"data": base64.b64encode(big).decode()})
        small = upload(client, image_bytes())

    assert as_file.status_code == as_base64.status_code == 413
    assert "20000 bytes" in as_file.json()["message"]
    assert small.status_code == 201


def test_uploads_may_exceed_the_general_body_limit_up_to_the_upload_limit(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_body_bytes=4096, max_upload_bytes=200_000)
    data = noise_png(100)  # ~30 KB, base64 ~40 KB: far past MAX_BODY_BYTES

    with TestClient(create_app(settings)) as client:
        response = client.post("/assets", json={"data": base64.b64encode(data).decode()})
        other = client.post("/knowledge/notes", json={"type": "blocker", "content": "x" * 5000})

    assert response.status_code == 201
    assert other.status_code == 413


def test_too_many_pixels_is_422_before_decoding(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assets_route, "MAX_UPLOAD_PIXELS", 100)

    response = upload(client, image_bytes(size=(20, 20)))

    assert response.status_code == 422
    assert "20x20" in response.json()["message"]


@pytest.mark.parametrize(
    ("kwargs", "status", "text"),
    [
        ({"json": {"data": "not base64 at all!"}}, 422, "body.data"),
        ({"json": {"data": ""}}, 422, "body.data"),
        ({"json": {"image": "abc"}}, 422, "body.data"),
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 422, "JSON"),
        ({"files": {"picture": ("a.png", b"x", "image/png")}}, 422, "body.file"),
        ({"content": b"\x89PNG", "headers": {"Content-Type": "image/png"}}, 415, "multipart"),
    ],
    ids=["bad-base64", "empty", "wrong-field", "bad-json", "wrong-part-name", "raw-body"],
)
def test_malformed_uploads_say_what_is_wrong(
    client: TestClient, kwargs: dict[str, object], status: int, text: str
) -> None:
    response = client.post("/assets", **kwargs)  # type: ignore[arg-type]

    assert response.status_code == status
    assert text in response.json()["message"]


@pytest.mark.parametrize(
    "asset_id",
    [
        "0" * 32,  # well-formed, not stored
        "..%2F..%2Fatelier.db",
        "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "ABCDEF0123456789ABCDEF0123456789",  # upper case is not an id
        "0" * 31,
        "0" * 32 + ".json",
        "x" * 200,
    ],
)
def test_unknown_or_malformed_ids_are_404(client: TestClient, asset_id: str) -> None:
    response = client.get(f"/assets/{asset_id}")

    assert response.status_code in (404, 422)
    if response.status_code == 404:
        assert response.json()["error"] == "not_found"
    assert "atelier.db" not in response.text and "root:" not in response.text


def test_generated_assets_are_served_too(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    record = AssetStore(settings.assets_dir).put(image_bytes("PNG"), kind="generated")

    with TestClient(create_app(settings)) as client:
        response = client.get(record.url)

    assert response.status_code == 200
    assert response.headers["cache-control"].startswith("public")


def test_assets_need_a_key_when_keys_are_set(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, auth_api_keys=[KEY])
    record = AssetStore(settings.assets_dir).put(image_bytes(), kind="generated")

    with TestClient(create_app(settings)) as client:
        anonymous = client.get(record.url)
        keyed = client.get(record.url, headers={"X-Api-Key": KEY})
        upload_anonymous = upload(client, image_bytes(colour="#000000"))

    assert anonymous.status_code == upload_anonymous.status_code == 401
    assert keyed.status_code == 200
    assert keyed.headers["cache-control"].startswith("private")  # never in a shared cache


# --- signed links (providers/asset_links.py, app/security.py) -------------------------


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(tmp_path, auth_api_keys=[KEY]))) as client:
        yield client


def test_with_api_keys_a_signed_link_loads_without_a_key_and_a_bare_one_does_not(
    keyed: TestClient,
) -> None:
    data = image_bytes()
    other = image_bytes(colour="#3d405b")
    stored = [upload_keyed(keyed, d).json()["asset_id"] for d in (data, other)]
    links = keyed.app.state.asset_links  # type: ignore[attr-defined]
    signed = links.sign(f"/assets/{stored[0]}")
    signature = signed.split("sig=", 1)[1]

    loaded = keyed.get(signed)
    assert loaded.status_code == 200 and loaded.content == data
    assert "private" in loaded.headers["cache-control"]
    assert keyed.head(signed).status_code == 200
    bare = keyed.get(f"/assets/{stored[0]}")
    assert bare.status_code == 401
    tampered = keyed.get(f"/assets/{stored[0]}?sig={signature[:-1]}A")
    assert tampered.status_code == 403 and "signature" in tampered.json()["detail"]
    # The signature opens its own asset only, and only for reading it.
    assert keyed.get(f"/assets/{stored[1]}?sig={signature}").status_code == 403
    assert keyed.post(f"/assets?sig={signature}", json={"data": "x"}).status_code == 401
    assert keyed.get(f"/threads?sig={signature}").status_code == 401
    # A key still works, with or without a signature.
    assert keyed.get(f"/assets/{stored[0]}", headers={"X-Api-Key": KEY}).status_code == 200


def test_an_open_service_signs_no_links(client: TestClient) -> None:
    assert client.app.state.asset_links is None  # type: ignore[attr-defined]


def upload_keyed(client: TestClient, data: bytes):  # type: ignore[no-untyped-def]
    return client.post(
        "/assets", files={"file": ("ref.png", data, "image/png")}, headers={"X-Api-Key": KEY}
    )
