"""API keys, CORS, the body limit and error bodies (app/security.py)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

import app.security as security
from app.deps import PrincipalDep
from app.main import create_app
from app.security import ANONYMOUS, OPEN_WARNING, ApiKeys, owner_id_for
from core.settings import Settings

KEY = "test-key-0123456789abcdef"
OTHER_KEY = "other-key-abcdefghijklmnop"
WRONG_KEY = "wrong-key-zyxwvutsrqponmlk"
NOTE = {"type": "blocker", "content": "禁止使用绝对化用语"}


#: An endpoint nothing listens on: the app's lifespan then skips the embedded model,
#: and nothing in these tests calls an LLM.
NO_LLM = "http://127.0.0.1:9/v1"


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Return settings for an app with its data under tmp_path and no embedded model."""
    return Settings(data_dir=tmp_path / "data", llm_base_url=NO_LLM, **overrides)


def _app(tmp_path: Path, **overrides: object) -> FastAPI:
    app = create_app(settings_for(tmp_path, **overrides))

    @app.get("/test/whoami")
    async def whoami(owner: PrincipalDep) -> dict[str, str]:
        return {"owner": owner}

    @app.get("/test/boom")
    async def boom() -> None:
        raise RuntimeError(f"database password is hunter2, key {KEY}")

    return app


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(_app(tmp_path, auth_api_keys=[KEY, OTHER_KEY])) as client:
        yield client


@pytest.fixture
def open_client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(_app(tmp_path)) as client:
        yield client


# --- API keys -----------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Api-Key": WRONG_KEY},
        {"Authorization": f"Bearer {WRONG_KEY}"},
        {"Authorization": KEY},
    ],
    ids=["missing", "wrong-x-api-key", "wrong-bearer", "no-bearer-scheme"],
)
def test_a_missing_or_wrong_key_gets_401_without_echoing_it(
    keyed: TestClient, headers: dict[str, str]
) -> None:
    response = keyed.get("/test/whoami", headers=headers)

    assert response.status_code == 401
    body = response.json()
    assert body["error"] == "unauthorized"
    assert "X-Api-Key" in body["message"] and "Bearer" in body["message"]
    assert body["detail"] == body["message"]
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert WRONG_KEY not in response.text and KEY not in response.text


def test_the_right_key_is_accepted_as_bearer_and_as_x_api_key(keyed: TestClient) -> None:
    as_bearer = keyed.get("/test/whoami", headers={"Authorization": f"Bearer {KEY}"})
    as_header = keyed.get("/test/whoami", headers={"X-Api-Key": KEY})
    lower_scheme = keyed.get("/test/whoami", headers={"Authorization": f"bearer {KEY}"})
    other = keyed.get("/test/whoami", headers={"X-Api-Key": OTHER_KEY})

    assert as_bearer.status_code == as_header.status_code == lower_scheme.status_code == 200
    assert as_bearer.json() == as_header.json() == {"owner": owner_id_for(KEY)}
    assert other.json() == {"owner": owner_id_for(OTHER_KEY)}


def test_a_wrong_bearer_does_not_hide_a_right_x_api_key(keyed: TestClient) -> None:
    response = keyed.get(
        "/test/whoami", headers={"Authorization": f"Bearer {WRONG_KEY}", "X-Api-Key": KEY}
    )

    assert response.status_code == 200


def test_every_route_but_the_public_ones_needs_a_key(keyed: TestClient) -> None:
    for path in ("/info", "/metrics", "/knowledge/notes", "/assets/" + "0" * 32, "/nowhere"):
        assert keyed.get(path).status_code == 401, path
    assert keyed.post("/knowledge/notes", json=NOTE).status_code == 401
    for path in ("/ok", "/health", "/ready", "/openapi.json", "/docs", "/"):
        assert keyed.get(path).status_code == 200, path


def test_owner_ids_are_stable_distinct_and_do_not_reveal_the_key() -> None:
    owner = owner_id_for(KEY)

    assert owner == owner_id_for(KEY)
    assert owner != owner_id_for(OTHER_KEY)
    assert owner.startswith("key_") and len(owner) == 4 + 24
    assert KEY not in owner and KEY[:8] not in owner


def test_a_presented_key_is_compared_with_every_key_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = security.secrets.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.secrets, "compare_digest", counting)
    keys = ApiKeys([KEY, OTHER_KEY, "third-key-0000000000000000"])

    assert keys.identify(KEY) == owner_id_for(KEY)  # matches the first key ...
    assert len(calls) == 3  # ... and still compares with all three
    assert all(len(a) == len(b) == 32 for a, b in calls)  # hashes: lengths never differ
    assert keys.identify(WRONG_KEY) is None
    assert keys.identify("x" * 5000) is None


def test_open_mode_lets_everyone_in_as_anonymous_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _app(tmp_path)
    with caplog.at_level(logging.WARNING, logger="app.security"), TestClient(app) as client:
        assert caplog.text.count(OPEN_WARNING) == 1  # said once, at start-up
        assert client.get("/test/whoami").json() == {"owner": ANONYMOUS}
        info = client.get("/info").json()
    assert info["auth"] == "open"
    assert any("OPEN" in warning for warning in info["warnings"])


def test_keyed_mode_logs_no_open_warning_and_info_says_api_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _app(tmp_path, auth_api_keys=[KEY])
    with caplog.at_level(logging.INFO, logger="app.security"), TestClient(app) as client:
        assert "API keys required" in caplog.text
        assert OPEN_WARNING not in caplog.text
        assert KEY not in caplog.text
        info = client.get("/info", headers={"X-Api-Key": KEY})
    assert info.json()["auth"] == "api_key"
    assert info.json()["warnings"] == []
    assert KEY not in info.text


def test_auth_api_keys_reads_comma_separated_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTH_API_KEYS", f" {KEY} , {OTHER_KEY},{KEY}")
    assert [k.get_secret_value() for k in Settings().auth_api_keys] == [KEY, OTHER_KEY]

    monkeypatch.setenv("AUTH_API_KEYS", f'["{KEY}"]')
    assert [k.get_secret_value() for k in Settings().auth_api_keys] == [KEY]

    monkeypatch.setenv("AUTH_API_KEYS", "")
    assert Settings().auth_api_keys == []


@pytest.mark.parametrize("bad", ["short-key", "a key with spaces in it", "ключ-ключ-ключ-ключ"])
def test_weak_or_unusable_keys_stop_start_up_without_printing_them(bad: str) -> None:
    with pytest.raises(ValidationError) as error:
        Settings(auth_api_keys=[KEY, bad])  # type: ignore[arg-type]

    assert "AUTH_API_KEYS[1]" in str(error.value)
    assert bad not in str(error.value) and KEY not in str(error.value)


async def test_langgraph_sdk_surfaces_the_401_message_and_sends_the_key(tmp_path: Path) -> None:
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import AuthenticationError

    with serving(create_app(settings_for(tmp_path, auth_api_keys=[KEY]))) as port:
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(AuthenticationError) as refused:
            await get_client(url=url, api_key=WRONG_KEY).http.get("/info")
        info = await get_client(url=url, api_key=KEY).http.get("/info")

    assert refused.value.status_code == 401
    assert "A valid API key is required" in refused.value.message
    assert info["auth"] == "api_key"


# --- CORS -----------------------------------------------------------------------


def _preflight(client: TestClient, origin: str) -> dict[str, str]:
    response = client.options(
        "/knowledge/notes",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    return dict(response.headers)


def test_cors_allows_only_the_configured_origins(tmp_path: Path) -> None:
    settings = {"auth_api_keys": [KEY], "cors_origins": "https://studio.example.com"}
    with TestClient(_app(tmp_path, **settings)) as client:
        allowed = _preflight(client, "https://studio.example.com")
        refused = _preflight(client, "https://evil.example.net")
        simple = client.get(
            "/info", headers={"Origin": "https://studio.example.com", "X-Api-Key": KEY}
        )

    assert allowed["access-control-allow-origin"] == "https://studio.example.com"
    assert "authorization" in allowed["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in refused
    assert simple.headers["access-control-allow-origin"] == "https://studio.example.com"
    assert "content-location" in simple.headers["access-control-expose-headers"].lower()


def test_no_cors_by_default(open_client: TestClient) -> None:
    headers = _preflight(open_client, "https://studio.example.com")

    assert "access-control-allow-origin" not in headers


def test_cors_origins_must_be_bare_origins() -> None:
    with pytest.raises(ValidationError, match="CORS_ORIGINS"):
        Settings(cors_origins="https://studio.example.com/app")  # type: ignore[arg-type]


# --- body limit -------------------------------------------------------------------


def _note_count(client: TestClient) -> int:
    return int(client.get("/knowledge/notes").json()["total"])


def test_an_oversize_body_gets_413_and_the_route_never_runs(tmp_path: Path) -> None:
    with TestClient(_app(tmp_path, max_body_bytes=4096)) as client:
        big = {**NOTE, "tags": ["t"] * 3, "content": "长" * 3000}  # 9 KB of UTF-8
        response = client.post("/knowledge/notes", json=big)
        assert _note_count(client) == 0

    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert "4096 bytes" in response.json()["message"]


def test_a_chunked_body_without_length_is_counted(tmp_path: Path) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"type": "blocker", "content": "'
        for _ in range(10):
            yield b"a" * 1000
        yield b'"}'

    with TestClient(_app(tmp_path, max_body_bytes=4096)) as client:
        response = client.post(
            "/knowledge/notes", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert _note_count(client) == 0

    assert response.status_code == 413


def test_a_body_under_the_limit_passes(tmp_path: Path) -> None:
    with TestClient(_app(tmp_path, max_body_bytes=4096)) as client:
        response = client.post("/knowledge/notes", json={**NOTE, "content": "a" * 3000})

    assert response.status_code == 201


@contextmanager
def serving(app: FastAPI) -> Iterator[int]:
    """Serve an app on a real uvicorn (h11) on 127.0.0.1 and yield its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http="h11", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[int]:
    """A real server with a 4 KiB body limit."""
    with serving(create_app(settings_for(tmp_path, max_body_bytes=4096))) as port:
        yield port


def _raw_request(port: int, head: str, body_chunks: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode("latin-1"))
        try:
            for chunk in body_chunks:
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before the whole body is sent
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            part = conn.recv(65536)
            if not part:
                break
            received += part
        return received


@pytest.mark.parametrize(
    "length_header", ["", "Content-Length: 20\r\n"], ids=["chunked", "chunked-lying-length"]
)
def test_a_real_server_refuses_a_chunked_body_past_the_limit(
    live_server: int, length_header: str
) -> None:
    head = (
        "POST /knowledge/notes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        f"{length_header}\r\n"
    )
    body = [b'{"type": "blocker", "content": "'] + [b"a" * 1000] * 10 + [b'"}']

    reply = _raw_request(live_server, head, body)

    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"payload_too_large" in rest
    import httpx

    listing = httpx.get(f"http://127.0.0.1:{live_server}/knowledge/notes", timeout=10)
    assert listing.json()["total"] == 0  # the route never stored anything


# --- error bodies -------------------------------------------------------------------


def test_an_unexpected_error_is_a_500_without_internals(tmp_path: Path) -> None:
    with TestClient(_app(tmp_path), raise_server_exceptions=False) as client:
        response = client.get("/test/boom")

    assert response.status_code == 500
    body = response.json()
    assert body["error"] == "internal_error"
    assert "error id" in body["message"]
    for leak in ("hunter2", KEY, "Traceback", "RuntimeError", 'File "'):
        assert leak not in response.text


def test_validation_errors_name_field_and_rule_but_do_not_echo_input(
    open_client: TestClient,
) -> None:
    secret_text = "SECRET-" + "x" * 4000
    response = open_client.post(
        "/knowledge/notes", json={"type": "blocker", "content": secret_text}
    )

    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "validation_error"
    assert "body.content" in body["message"] and "4000" in body["message"]
    assert body["detail"][0]["loc"] == ["body", "content"]
    assert "SECRET-" not in response.text


def test_malformed_json_is_a_422_that_says_so(open_client: TestClient) -> None:
    response = open_client.post(
        "/knowledge/notes", content=b'{"type": ', headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 422
    assert "not valid JSON" in response.json()["message"]


def test_http_errors_keep_fastapis_detail_and_gain_a_message(open_client: TestClient) -> None:
    response = open_client.get("/knowledge/notes/nope")

    assert response.status_code == 404
    assert response.json() == {
        "detail": "Note 'nope' not found.",
        "error": "not_found",
        "message": "Note 'nope' not found.",
    }
