"""The MCP endpoint `/mcp` (issue 24): every assistant is a tool (app/mcp.py).

A real uvicorn on 127.0.0.1 serves `create_app(settings)` with its default assistants
(the real `atelier` pipeline) and the scripted OpenAI-compatible model
(`tests/app/atelier_llm.py`). The official `mcp` Python client drives it as an MCP
client would: its Streamable HTTP transport (`streamable_http_client`) under a
`ClientSession`, speaking the handshake protocol (`initialize`) or protocol
2026-07-28 (`discover`).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from fastapi.testclient import TestClient
from langgraph_sdk import get_client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app import mcp as mcp_module
from app.main import create_app
from app.mcp import tool_name
from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.app.sample_graphs import sample_assistants
from tests.app.test_assistants_service import writer_systems
from tests.support.docs import code_block
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployments
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
KEY = "mcp-acceptance-key-0123456789"
#: The built-in assistants' tools, in the listing's order (by assistant id): an id with
#: `_` gets a readable name with a digest.
BUILTIN_TOOLS = ["atelier", tool_name("campaign_planner"), "team"]
OTHER_KEY = "mcp-other-key-0123456789abc"
#: What an MCP client accepts (the transport refuses a request that takes less).
ACCEPT = "application/json, text/event-stream"


class Gate:
    """A responder wrapper that can hold the writer's answers (a run still going)."""

    def __init__(self, inner: Callable[[ChatRequest], Reply]) -> None:
        self.inner = inner
        self.delay = 0.0

    def __call__(self, req: ChatRequest) -> Reply:
        reply = self.inner(req)
        if not req.tools and self.delay:
            return Reply.delay(self.delay, reply)
        return reply


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate(atelier_responder())


@pytest.fixture(scope="module")
def llm(gate: Gate) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(gate) as server:
        yield server


@pytest.fixture
def writer_held(gate: Gate) -> Iterator[Gate]:
    """Hold the writer's answers for 30 s, so a run is still going when the test acts."""
    gate.delay = 30.0
    yield gate
    gate.delay = 0.0


@pytest.fixture(scope="module")
def open_server(
    tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    """The service without API keys."""
    settings = service_settings(tmp_path_factory.mktemp("open"), llm.base_url)
    with LiveServer(settings, None) as live:
        yield live


@pytest.fixture(scope="module")
def keyed_server(
    tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    """The service with API keys (AUTH_API_KEYS)."""
    settings = service_settings(
        tmp_path_factory.mktemp("keyed"), llm.base_url, auth_api_keys=[KEY, OTHER_KEY]
    )
    with LiveServer(settings, None) as live:
        yield live


@pytest.fixture(scope="module")
def sample_server(
    tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    """The service serving the sample graphs of the service tests (no `atelier`)."""
    settings = service_settings(tmp_path_factory.mktemp("sample"), llm.base_url)
    with LiveServer(settings, sample_assistants) as live:
        yield live


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx (round robin) and `atelier worker` twice."""
    env = {"AUTH_API_KEYS": f"{KEY},{OTHER_KEY}", "LLM_TIMEOUT": "30"}
    with processes_deployment(request, tmp_path_factory, llm.base_url, cli=True, env=env) as served:
        yield served


@pytest.fixture(params=DEPLOYMENTS)
def deployed(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The keyed service in each deployment the service suites use (`serve_deployment`)."""

    def settings(**scale: Any) -> Settings:
        keys = [KEY, OTHER_KEY]
        return service_settings(tmp_path / "data", llm.base_url, auth_api_keys=keys, **scale)

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


@asynccontextmanager
async def mcp_session(
    url: str,
    headers: dict[str, str] | None = None,
    *,
    statuses: list[int] | None = None,
    modern: bool = False,
) -> AsyncIterator[ClientSession]:
    """Open an MCP session with the official client on `url`/mcp, initialized.

    Args:
        url: The service's base URL.
        headers: Sent with every request (the API key).
        statuses: Collects the HTTP status of every response the client gets.
        modern: Speak protocol 2026-07-28 (`discover`) instead of the handshake.
    """

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    client = httpx2.AsyncClient(
        headers=headers or {}, timeout=60, event_hooks={"response": [record]}
    )
    async with (
        client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        if modern:
            await session.discover()
        else:
            await session.initialize()
        yield session


def http(url: str, key: str | None = None) -> httpx.AsyncClient:
    """Return an HTTP client of the service's own API (with the key, if any)."""
    return httpx.AsyncClient(base_url=url, headers={"X-Api-Key": key} if key else {}, timeout=60)


async def thread_ids(url: str) -> set[str]:
    async with http(url) as client:
        return {t["thread_id"] for t in (await client.post("/threads/search", json={})).json()}


# --- listing and calling -----------------------------------------------------------


async def test_every_assistant_is_listed_as_a_tool_with_its_input_schema(
    open_server: LiveServer,
) -> None:
    async with mcp_session(open_server.url) as session:
        listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    async with http(open_server.url) as client:
        served = (await client.post("/assistants/search", json={"limit": 1000})).json()
        schemas = (await client.get("/assistants/atelier/schemas")).json()
    assert set(tools) == {tool_name(a["assistant_id"]) for a in served} and "atelier" in tools

    atelier = tools["atelier"]
    assert atelier.input_schema == schemas["input_schema"]
    assert "request" in atelier.input_schema["properties"]
    assert "request" in atelier.input_schema["required"]
    description = next(a["description"] for a in served if a["assistant_id"] == "atelier")
    assert atelier.description and atelier.description.startswith(description)
    assert "auto_confirm" in atelier.description


async def test_calling_atelier_answers_the_post_with_progress_and_image_links(
    open_server: LiveServer,
) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with mcp_session(open_server.url) as session:
        result = await session.call_tool(
            "atelier", {"request": REQUEST}, progress_callback=on_progress
        )

    assert not result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    structured = result.structured_content
    assert structured is not None and structured["outcome"] == "completed"
    title = structured["post"]["title"]
    assert title and text.startswith(f"# {title}")
    assert all(f"#{tag}" in text for tag in structured["post"]["tags"])
    links = [image["url"] for image in structured["images"]]
    assert links and all(link.startswith(f"{open_server.url}/assets/") for link in links)
    assert all(f"]({link})" in text for link in links)

    steps = [message for _value, _total, message in progress]
    assert "planner" in steps and "writer_agent" in steps and steps[-1] == "finalize"
    assert [value for value, _total, _message in progress] == list(range(1, len(steps) + 1))

    async with http(open_server.url) as client:
        image = await client.get(links[0])
        thread = (await client.get(f"/threads/{structured['thread_id']}")).json()
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert thread["values"]["auto_confirm"] is True  # nobody can answer a question here
    assert thread["values"]["result"]["post"]["title"] == title
    # A chat UI opening the thread shows what was asked, then the post.
    asked, *answers = thread["values"]["messages"]
    assert asked["type"] == "human" and asked["content"] == REQUEST
    assert [m["type"] for m in answers] == ["ai"]


@pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
async def test_every_deployment_answers_a_call_with_progress(
    deployed: Served, modern: bool
) -> None:
    """Embedded, PostgreSQL + Redis, and replicas behind round robin with workers."""
    steps: list[str | None] = []

    async def on_progress(_value: float, _total: float | None, message: str | None) -> None:
        steps.append(message)

    headers = {"X-Api-Key": KEY}
    async with mcp_session(deployed.url, headers, modern=modern) as session:
        assert "atelier" in [tool.name for tool in (await session.list_tools()).tools]
        result = await session.call_tool(
            "atelier", {"request": REQUEST}, progress_callback=on_progress
        )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["post"]["title"]
    assert "writer_agent" in steps and steps[-1] == "finalize"
    async with http(deployed.url, KEY) as client:
        image = await client.get(result.structured_content["images"][0]["url"])
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"


async def test_a_call_speaking_protocol_2026_answers_the_post(open_server: LiveServer) -> None:
    async with mcp_session(open_server.url, modern=True) as session:
        assert session.protocol_version == "2026-07-28"
        result = await session.call_tool("atelier", {"request": REQUEST})
    assert not result.is_error, result.content
    assert result.structured_content and result.structured_content["post"]["title"]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"request": ""}, "arguments.request: String should have at least 1 character"),
        ({"request": "字" * 4001}, "arguments.request: String should have at most 4000"),
        ({"request": REQUEST, "platform": "No Such!"}, "arguments.platform: String should match"),
        ({"request": REQUEST, "colour": "red"}, "arguments.colour: Extra inputs are not permitted"),
        ({}, "arguments.request: Field required"),
    ],
)
async def test_a_bad_argument_is_a_tool_error_naming_the_field_and_leaves_nothing(
    open_server: LiveServer, arguments: dict[str, Any], named: str
) -> None:
    before = await thread_ids(open_server.url)
    async with mcp_session(open_server.url) as session:
        result = await session.call_tool("atelier", arguments)
    assert result.is_error
    message = result.content[0].text  # type: ignore[union-attr]
    assert named in message
    assert "Traceback" not in message and "pydantic" not in message
    assert await thread_ids(open_server.url) == before


async def test_the_tools_are_the_assistants_served_and_a_failed_run_a_tool_error(
    sample_server: LiveServer,
) -> None:
    async with mcp_session(sample_server.url) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        failed = await session.call_tool("boom", {"x": 1})
    assert set(tools) == {"boom", "burst", "slow", "studio"}
    async with http(sample_server.url) as client:
        for name, tool in tools.items():
            schemas = (await client.get(f"/assistants/{name}/schemas")).json()
            # Any object where LangGraph cannot describe the graph's input.
            assert tool.input_schema == (schemas["input_schema"] or {"type": "object"}), name
    assert failed.is_error
    message = failed.content[0].text  # type: ignore[union-attr]
    assert message.startswith("The run failed") and "RuntimeError" in message
    assert "/srv/secret" not in message


async def test_an_unknown_tool_is_a_protocol_error_naming_the_tools(
    open_server: LiveServer,
) -> None:
    async with mcp_session(open_server.url) as session:
        with pytest.raises(MCPError, match=r"'ghost'.*atelier"):
            await session.call_tool("ghost", {"request": REQUEST})


async def interrupted_run(url: str, before: set[str]) -> None:
    """Wait (at most 10 s) until the one thread not in `before` has one run, interrupted."""
    (thread_id,) = await thread_ids(url) - before
    statuses: list[str] = []
    async with http(url) as client:
        with anyio.fail_after(10):
            while statuses != ["interrupted"]:
                runs = (await client.get(f"/threads/{thread_id}/runs")).json()
                statuses = [run["status"] for run in runs]
                await anyio.sleep(0.05)


async def test_cancelling_a_2026_call_cancels_its_run(
    open_server: LiveServer, writer_held: Gate
) -> None:
    before = await thread_ids(open_server.url)
    async with mcp_session(open_server.url, modern=True) as session:
        with anyio.move_on_after(2):  # the run is at the held writer by then
            await session.call_tool("atelier", {"request": REQUEST})
        await interrupted_run(open_server.url, before)  # the client is still there


async def test_a_handshake_client_that_leaves_mid_call_cancels_its_run(
    open_server: LiveServer, writer_held: Gate
) -> None:
    before = await thread_ids(open_server.url)
    async with mcp_session(open_server.url) as session:
        with anyio.move_on_after(2):
            await session.call_tool("atelier", {"request": REQUEST})
    await interrupted_run(open_server.url, before)


# --- the HTTP side: methods, bodies, API keys, OpenAPI ------------------------------


async def test_only_post_is_served_and_a_body_must_be_json(open_server: LiveServer) -> None:
    async with http(open_server.url) as client:
        for method in ("GET", "DELETE"):
            response = await client.request(method, "/mcp")
            assert response.status_code == 405 and response.headers["allow"] == "POST"
        not_json = await client.post(
            "/mcp",
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
            headers={"Content-Type": "text/plain", "Accept": ACCEPT},
        )
    assert not_json.status_code == 415 and "application/json" in not_json.json()["message"]


async def test_with_api_keys_a_keyless_client_is_refused(keyed_server: LiveServer) -> None:
    statuses: list[int] = []
    with pytest.raises(ExceptionGroup) as refused:  # the client's task groups wrap its error
        async with mcp_session(keyed_server.url, statuses=statuses):
            pass
    assert refused.group_contains(MCPError)
    assert statuses == [401]
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for key in (None, "not-the-key"):
        async with http(keyed_server.url, key) as client:
            response = await client.post("/mcp", json=listing, headers={"Accept": ACCEPT})
        assert response.status_code == 401 and "API key" in response.json()["message"]


async def test_with_a_key_the_call_works_and_its_run_belongs_to_that_key(
    keyed_server: LiveServer,
) -> None:
    async with mcp_session(keyed_server.url, {"Authorization": f"Bearer {KEY}"}) as session:
        assert [tool.name for tool in (await session.list_tools()).tools] == BUILTIN_TOOLS
        result = await session.call_tool("atelier", {"request": REQUEST})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    thread_id = result.structured_content["thread_id"]
    link = result.structured_content["images"][0]["url"]
    async with http(keyed_server.url, KEY) as mine:
        thread = await mine.get(f"/threads/{thread_id}")
    async with http(keyed_server.url, OTHER_KEY) as other:
        hidden = await other.get(f"/threads/{thread_id}")
    async with httpx.AsyncClient(timeout=30) as keyless:
        image = await keyless.get(link)  # a signed link: loads without a key
        bare = await keyless.get(link.split("?")[0])
    assert thread.status_code == 200 and thread.json()["status"] == "idle"
    assert image.status_code == 200 and "?sig=" in link
    assert bare.status_code == 401
    assert hidden.status_code == 404


async def test_a_call_may_name_an_assistant_the_caller_created(keyed_server: LiveServer) -> None:
    async with http(keyed_server.url, KEY) as mine:
        created = await mine.post(
            "/assistants", json={"graph_id": "atelier", "context": {"voice": "MCP 的语气"}}
        )
    preset = created.json()["assistant_id"]
    async with mcp_session(keyed_server.url, {"X-Api-Key": KEY}) as session:
        result = await session.call_tool(preset, {"request": REQUEST})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    async with http(keyed_server.url, KEY) as mine:
        thread_id = result.structured_content["thread_id"]
        state = (await mine.get(f"/threads/{thread_id}/state")).json()
        runs = (await mine.get(f"/threads/{thread_id}/runs")).json()
    assert state["values"]["brand"] == {"voice": "MCP 的语气"}
    assert [r["assistant_id"] for r in runs] == [preset]
    async with mcp_session(keyed_server.url, {"X-Api-Key": OTHER_KEY}) as session:
        with pytest.raises(MCPError, match="Unknown tool"):
            await session.call_tool(preset, {"request": REQUEST})


@pytest.mark.parametrize("keyed", [False, True], ids=["open", "keyed"])
def test_the_openapi_document_describes_the_mcp_endpoint(tmp_path: Path, keyed: bool) -> None:
    keys = [KEY] if keyed else []
    settings = service_settings(tmp_path, "http://127.0.0.1:9/v1", auth_api_keys=keys)
    document = TestClient(create_app(settings)).get("/openapi.json").json()
    item = document["paths"]["/mcp"]
    assert set(item) == {"post"}
    operation = item["post"]
    assert "MCP" in operation["summary"] and "Streamable HTTP" in operation["description"]
    assert ("401" in operation["responses"]) is keyed
    assert {"200", "202", "400", "403", "406", "413", "415"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/JsonRpcMessage"}
    assert "JsonRpcMessage" in document["components"]["schemas"]


# --- the caller's own assistants: brand presets are tools too ----------------------

#: A tool name every client takes (see `app.mcp`): no dot, at most 64 characters.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@pytest.mark.parametrize(
    "assistant_id",
    ["atelier", "3f2b8c1e-9d4a-4c1b-8e2f-0a1b2c3d4e5f", "a" * 64],
)
def test_an_id_of_letters_digits_and_dashes_is_its_own_tool_name(assistant_id: str) -> None:
    assert tool_name(assistant_id) == assistant_id


def test_any_other_id_gets_a_stable_safe_name_distinct_from_its_neighbours() -> None:
    ids = ["brand.coffee", "brand:coffee", "brand-coffee", "a" * 65, "a" * 64 + "b", "x" * 128]
    names = [tool_name(i) for i in ids]

    assert all(SAFE_NAME.match(name) for name in names), names
    assert len(set(names)) == len(ids)
    assert names[2] == "brand-coffee"  # plain: itself
    assert names[0].startswith("brand-coffee_") and names[1].startswith("brand-coffee_")
    assert [tool_name(i) for i in ids] == names  # stable


async def test_every_deployment_lists_a_preset_for_its_key_only_and_runs_it_in_its_voice(
    deployed: Served, llm: ScriptedOpenAIServer
) -> None:
    """Embedded, PostgreSQL + Redis, and replicas behind round robin with workers."""
    voice = "像咖啡师一样聊豆子，短句，不用感叹号"
    sdk = get_client(url=deployed.url, api_key=KEY)
    preset = await sdk.assistants.create(
        "atelier",
        context={"brand_name": "山间咖啡", "voice": voice, "platform": "weibo"},
        name="山间",
        description="The coffee shop's account.",
    )
    preset_id = preset["assistant_id"]

    async with mcp_session(deployed.url, {"X-Api-Key": KEY}) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert list(tools)[:3] == BUILTIN_TOOLS and preset_id in tools
        tool = tools[preset_id]
        assert tool.title == "山间"
        assert tool.description is not None
        headline = "山间: Writes weibo posts for 山间咖啡 (写 山间咖啡 的帖子)."
        assert tool.description.startswith(headline)
        assert voice in tool.description and "The coffee shop's account." in tool.description
        assert tool.input_schema == tools["atelier"].input_schema
        llm.reset()
        result = await session.call_tool(preset_id, {"request": REQUEST})
    async with mcp_session(deployed.url, {"X-Api-Key": OTHER_KEY}) as other:
        theirs = [tool.name for tool in (await other.list_tools()).tools]

    assert theirs == BUILTIN_TOOLS
    assert not result.is_error, result.content
    assert result.structured_content is not None
    systems = writer_systems(llm)
    assert systems and all(voice in s and "山间咖啡" in s for s in systems)
    runs = await sdk.runs.list(result.structured_content["thread_id"])
    assert [r["assistant_id"] for r in runs] == [preset_id]


async def test_without_api_keys_everyone_is_one_owner_and_an_odd_id_gets_a_safe_name(
    open_server: LiveServer,
) -> None:
    preset_id = "shop.coffee:v2"
    sdk = get_client(url=open_server.url)
    await sdk.assistants.create(
        "atelier", assistant_id=preset_id, context={"brand_name": "豆仓"}, if_exists="do_nothing"
    )
    name = tool_name(preset_id)

    async with mcp_session(open_server.url) as session:  # no key: the owner "anonymous"
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool(name, {"request": REQUEST})

    assert SAFE_NAME.match(name) and name in tools and preset_id not in tools
    assert tools[name].description and "写 豆仓 的帖子" in tools[name].description
    assert not result.is_error, result.content
    assert result.structured_content is not None
    runs = await sdk.runs.list(result.structured_content["thread_id"])
    assert [r["assistant_id"] for r in runs] == [preset_id]


async def test_the_listing_pages_through_the_callers_assistants(
    open_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_module, "TOOLS_PAGE", 2)
    sdk = get_client(url=open_server.url)
    for n in range(3):
        await sdk.assistants.create("atelier", context={"brand_name": f"第{n}家"})
    async with http(open_server.url) as client:
        served = (await client.post("/assistants/search", json={"limit": 1000})).json()

    pages: list[list[str]] = []
    cursor: str | None = None
    async with mcp_session(open_server.url) as session:
        while not pages or cursor is not None:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = await session.list_tools(params=params)
            pages.append([tool.name for tool in listed.tools])
            cursor = listed.next_cursor
        with pytest.raises(MCPError, match="Invalid cursor"):
            await session.list_tools(params=types.PaginatedRequestParams(cursor="page-two"))

    listed_names = [name for page in pages for name in page]
    assert pages[0][:3] == BUILTIN_TOOLS and len(pages[0]) == 5
    assert all(len(page) <= 2 for page in pages[1:])
    assert sorted(listed_names) == sorted(tool_name(a["assistant_id"]) for a in served)


def readme_snippet(page: str, containing: str) -> str:
    """Return the Python block of docs/<page>.md that contains `containing`."""
    return code_block(page, "python", containing=containing)


async def run_snippet(snippet: str, url: str, key: str) -> dict[str, Any]:
    """Run a README snippet as a notebook does (top-level await, `KEY` defined) on `url`."""
    source = snippet.replace("http://localhost:8000", url)
    namespace: dict[str, Any] = {"KEY": key}
    code = compile(source, "<README>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        await result
    return namespace


async def test_the_readme_snippet_runs_as_written(
    keyed_server: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    llm.reset()
    namespace = await run_snippet(
        readme_snippet("mcp", "streamable_http_client"), keyed_server.url, KEY
    )

    preset_id = namespace["brand"]["assistant_id"]
    assert namespace["tools"][:3] == BUILTIN_TOOLS and preset_id in namespace["tools"]
    result = namespace["result"]
    assert not result.is_error, result.content
    assert result.content[0].text.startswith("# ")
    assert any("像学姐一样亲切" in s for s in writer_systems(llm))
