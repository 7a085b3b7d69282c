"""`/mcp` checks `Origin` and `Host` against DNS rebinding (issue 33, app/mcp_guard.py).

A real uvicorn serves the app open (no API keys) and keyed; requests are raw
JSON-RPC POSTs with the headers a browser page would send, and the official `mcp`
client, which sends no `Origin`, keeps working (tests/app/test_mcp.py drives it on
the three deployments).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from app.mcp_guard import FOREIGN_HOST, FOREIGN_ORIGIN, McpOriginGuard, is_loopback, split_host
from core.settings import Settings
from tests.app.harness import LiveServer, service_settings
from tests.app.sample_graphs import sample_assistants

KEY = "mcp-guard-test-key-0123456789"
STUDIO = "https://studio.example.com"
LISTING = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
#: What an MCP client accepts (the transport refuses a request that takes less).
ACCEPT = "application/json, text/event-stream"
#: No model is called: listing tools runs nothing.
NO_MODEL = "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The service without API keys, a browser origin allowed, one extra host name."""
    settings = service_settings(
        tmp_path_factory.mktemp("open"),
        NO_MODEL,
        cors_origins=[STUDIO],
        mcp_allowed_hosts=["atelier.lan", "studio.internal:8000"],
    )
    with LiveServer(settings, sample_assistants) as live:
        yield live


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The service with an API key and the same browser origin allowed."""
    settings = service_settings(
        tmp_path_factory.mktemp("keyed"), NO_MODEL, auth_api_keys=[KEY], cors_origins=[STUDIO]
    )
    with LiveServer(settings, sample_assistants) as live:
        yield live


def listing(server: LiveServer, **headers: str) -> httpx.Response:
    """POST `tools/list` to the server's /mcp with `headers` (Host and Origin among them)."""
    sent = {"Accept": ACCEPT, **headers}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        return client.post("/mcp", json=LISTING, headers=sent)


def test_a_browser_page_from_a_foreign_origin_gets_403(
    open_server: LiveServer, keyed_server: LiveServer
) -> None:
    for server, key in ((open_server, {}), (keyed_server, {"X-Api-Key": KEY})):
        for origin in (
            "https://evil.example",
            "null",
            f"{STUDIO}.evil.example",
            "http://localhost",
        ):
            response = listing(server, Origin=origin, **key)
            assert response.status_code == 403, (origin, response.text)
            body = response.json()
            assert body["message"] == FOREIGN_ORIGIN and "CORS_ORIGINS" in body["message"]
            assert origin not in response.text  # the request's own header is not echoed
        assert listing(server, Origin=STUDIO, **key).status_code == 200
        assert listing(server, Origin=STUDIO.upper(), **key).status_code == 200
        assert listing(server, **key).status_code == 200  # no Origin: not a browser


def test_open_a_rebound_host_gets_403_and_loopback_or_listed_hosts_pass(
    open_server: LiveServer,
) -> None:
    port = open_server.port
    # A page on rebind.attacker.example whose name now resolves to this machine.
    for host in (f"rebind.attacker.example:{port}", "attacker.example", "10.0.0.5", "atelier.lan."):
        response = listing(open_server, Host=host)
        assert response.status_code == 403, (host, response.text)
        assert response.json()["message"] == FOREIGN_HOST
        rebound = listing(open_server, Host=host, Origin=f"http://{host}")
        assert rebound.status_code == 403
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        "LOCALHOST",
        f"[::1]:{port}",
        "127.9.9.9",
        "atelier.lan:8080",  # listed without a port: any port
        "studio.internal:8000",
    ):
        assert listing(open_server, Host=host).status_code == 200, host
    assert listing(open_server, Host="studio.internal:9000").status_code == 403


def test_with_api_keys_the_host_is_not_checked(keyed_server: LiveServer) -> None:
    response = listing(keyed_server, Host="atelier.example.com", **{"X-Api-Key": KEY})
    assert response.status_code == 200
    assert listing(keyed_server, Host="atelier.example.com").status_code == 401  # the key first


async def test_the_mcp_client_works_from_an_allowed_origin_and_not_from_another(
    open_server: LiveServer,
) -> None:
    async def tools(origin: str, statuses: list[int]) -> list[str]:
        async def record(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        client = httpx2.AsyncClient(
            headers={"Origin": origin}, timeout=30, event_hooks={"response": [record]}
        )
        async with (
            client,
            streamable_http_client(f"{open_server.url}/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]

    assert "burst" in await tools(STUDIO, [])
    statuses: list[int] = []
    with pytest.raises(ExceptionGroup):  # the client's task groups wrap its error
        await tools("https://evil.example", statuses)
    assert statuses == [403]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost:8000", ("localhost", "8000")),
        ("LocalHost", ("localhost", None)),
        ("[::1]:8123", ("::1", "8123")),
        ("[::1]", ("::1", None)),
        ("127.0.0.1", ("127.0.0.1", None)),
        ("a.example:", ("a.example", "")),
    ],
)
def test_a_host_header_splits_into_host_and_port(
    value: str, expected: tuple[str, str | None]
) -> None:
    assert split_host(value) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.200.0.1", True),
        ("::1", True),
        ("localhost.attacker.example", False),
        ("0.0.0.0", False),
        ("::ffff:10.0.0.1", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_only_loopback_hosts_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_any_origin_when_cors_allows_any_and_a_missing_host_is_refused_when_open() -> None:
    guard = McpOriginGuard(lambda *_: None, allowed_origins=["*"], check_host=True)  # type: ignore[arg-type]
    assert guard.origin_allowed("https://anything.example") and guard.origin_allowed(None)
    assert not guard.host_allowed(None) and not guard.host_allowed("")
    keyed = McpOriginGuard(lambda *_: None, allowed_origins=[], check_host=False)  # type: ignore[arg-type]
    assert keyed.host_allowed(None) and not keyed.origin_allowed("https://studio.example.com")


def test_mcp_allowed_hosts_reads_a_list_and_refuses_urls() -> None:
    settings = Settings(_env_file=None, mcp_allowed_hosts="Atelier.LAN, studio:8000")  # type: ignore[call-arg, arg-type]
    assert settings.mcp_allowed_hosts == ["atelier.lan", "studio:8000"]
    for bad in ("https://atelier.lan", "atelier.lan/mcp", "*"):
        with pytest.raises(ValidationError, match="MCP_ALLOWED_HOSTS"):
            Settings(_env_file=None, mcp_allowed_hosts=bad)  # type: ignore[call-arg, arg-type]
