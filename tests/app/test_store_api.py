"""The Store and the brand-scoped vault, served: the official SDKs on every deployment (issue 25).

On each deployment of `serve_deployment` (embedded, scale-out in one process, API
replicas + workers processes), with two API keys and the scripted OpenAI-compatible
server on loopback serving both the `atelier` pipeline's model and `/embeddings`:

- the Store round trip through the Python SDK's `client.store` and the pinned JS
  SDK's (`tests/js/flows.mjs` "store"), the second key seeing none of it;
- a run of brand A (input `brand.knowledge_namespace`) retrieves its brand's notes
  and the shared ones of its key, never brand B's colliding notes nor another key's:
  the `knowledge.injected` event and every prompt the scripted model received say so.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.engine.test_store import topic_vector
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

JS_DIR = Path(__file__).resolve().parents[1] / "js"
KEY = "store-acceptance-key-0123456789"
OTHER_KEY = "store-acceptance-other-key-9876"
#: What brand A's and brand B's runs ask for: the scripted planner's topic is 平价护肤.
REQUEST = "写一篇小红书笔记：平价护肤，学生党友好"
#: Notes whose keywords collide: every one matches the run's query.
BRAND_A_NOTE = "平价护肤：甲品牌只推荐自家的氨基酸洁面"
BRAND_B_NOTE = "平价护肤：乙品牌的秘密配方绝不外传"
SHARED_NOTE = "平价护肤类笔记标题不超过 20 个字"
OTHER_KEYS_NOTE = "平价护肤：另一个客户的甲品牌内部规则"


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    """The pipeline's scripted model, which also embeds text by topic."""
    with ScriptedOpenAIServer(atelier_responder(), embedder=topic_vector) as llm:
        yield llm


def embeddings_settings(llm: ScriptedOpenAIServer) -> dict[str, Any]:
    return {
        "embeddings_base_url": llm.base_url,
        "embeddings_api_key": "test",
        "embeddings_model": "scripted",
    }


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {
        "AUTH_API_KEYS": f"{KEY},{OTHER_KEY}",
        "LLM_TIMEOUT": "30",
        **{name.upper(): str(value) for name, value in embeddings_settings(scripted_llm).items()},
    }
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def served(
    request: pytest.FixtureRequest, tmp_path: Path, scripted_llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The service with its default assistants and two API keys, in each deployment."""
    scripted_llm.reset()

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            scripted_llm.base_url,
            auth_api_keys=[KEY, OTHER_KEY],
            **embeddings_settings(scripted_llm),
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    assert found, "Node.js is needed for the JS SDK tests (.ci/run installs it)"
    if not (JS_DIR / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm is needed to install tests/js (npm ci)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True)
    return found


async def test_store_round_trip_through_the_python_sdk(served: Served) -> None:
    client = get_client(url=served.url, api_key=KEY)
    other = get_client(url=served.url, api_key=OTHER_KEY)
    root = f"brand-{uuid.uuid4().hex[:8]}"
    memory = [root, "memory"]
    await client.store.put_item(memory, "coffee", {"text": "咖啡 拿铁 咖啡", "kind": "menu"})
    await client.store.put_item(memory, "skin", {"text": "护肤 面霜", "kind": "voice"})
    await client.store.put_item([root, "facts"], "trip", {"text": "旅行", "kind": "menu"}, ttl=60)

    item = await client.store.get_item(memory, "coffee")
    assert item is not None
    assert (item["namespace"], item["key"]) == (memory, "coffee")
    assert item["value"] == {"text": "咖啡 拿铁 咖啡", "kind": "menu"}
    menu = await client.store.search_items([root], filter={"kind": "menu"})
    assert sorted(i["key"] for i in menu["items"]) == ["coffee", "trip"]
    ranked = await client.store.search_items([root], query="护肤")
    assert ranked["items"][0]["key"] == "skin"
    assert ranked["items"][0]["score"] > ranked["items"][1]["score"]
    listed = await client.store.list_namespaces(prefix=[root])
    assert listed["namespaces"] == [[root, "facts"], [root, "memory"]]
    assert (await client.store.list_namespaces(suffix=["memory"], prefix=[root]))["namespaces"] == [
        memory
    ]
    assert (await client.store.list_namespaces(prefix=[root], max_depth=1))["namespaces"] == [
        [root]
    ]

    assert await other.store.get_item(memory, "coffee") is None
    assert (await other.store.search_items([root]))["items"] == []
    assert (await other.store.search_items([], query="咖啡"))["items"] == []
    assert (await other.store.list_namespaces(prefix=[root]))["namespaces"] == []

    await client.store.delete_item(memory, "coffee")
    assert await client.store.get_item(memory, "coffee") is None
    assert [i["key"] for i in (await client.store.search_items(memory))["items"]] == ["skin"]


@pytest.mark.slow
def test_store_round_trip_through_the_js_sdk(node: str, served: Served) -> None:
    root = f"brand-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [node, "flows.mjs", "store", served.url, KEY, OTHER_KEY, root],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["ranked"][0] == "coffee"
    assert result["namespaces"] == [f"{root}/facts", f"{root}/memory"]


def add_note(http: httpx.Client, content: str, namespace: str, key: str = KEY) -> str:
    """Add an approved blocker note as `key`; return its id."""
    response = http.post(
        "/knowledge/notes",
        json={"type": "blocker", "status": "approved", "content": content, "namespace": namespace},
        headers={"X-Api-Key": key},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.slow
async def test_a_brand_run_never_retrieves_another_brands_or_keys_notes(
    served: Served, scripted_llm: ScriptedOpenAIServer
) -> None:
    brand_a, brand_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=served.url, timeout=30) as http:
        ids = {
            "a": add_note(http, BRAND_A_NOTE, brand_a),
            "b": add_note(http, BRAND_B_NOTE, brand_b),
            "shared": add_note(http, SHARED_NOTE, "shared"),
            "other": add_note(http, OTHER_KEYS_NOTE, brand_a, key=OTHER_KEY),
        }
    client = get_client(url=served.url, api_key=KEY)
    thread = await client.threads.create()
    scripted_llm.reset()

    parts = [
        part
        async for part in client.runs.stream(
            thread["thread_id"],
            "atelier",
            input={
                "request": REQUEST,
                "auto_confirm": True,
                "brand": {"knowledge_namespace": brand_a},
            },
            stream_mode=["custom"],
            stream_subgraphs=True,
        )
    ]

    assert parts[-1].event == "end" and parts[-1].data["status"] == "success", parts[-3:]
    injected = [
        p.data for p in parts if p.event == "custom" and p.data["type"] == "knowledge.injected"
    ]
    assert injected, "rag ran"
    seen = {note["id"] for event in injected for note in event["notes"]}
    assert {ids["a"], ids["shared"]} <= seen
    assert not seen & {ids["b"], ids["other"]}
    prompts = [json.dumps(r.messages, ensure_ascii=False) for r in scripted_llm.requests]
    writer = [p for r, p in zip(scripted_llm.requests, prompts, strict=True) if not r.tools]
    assert any(BRAND_A_NOTE in p for p in writer), "the writer was not shown brand A's note"
    assert not any(BRAND_B_NOTE in p or OTHER_KEYS_NOTE in p for p in prompts)


async def test_the_readme_store_snippet_runs_as_written(served: Served) -> None:
    """docs/store.md: the SDK snippet, run as a notebook runs it (top-level await)."""
    snippet = code_block("store", "python")
    source = snippet.replace("http://localhost:8000", served.url)
    namespace: dict[str, Any] = {"KEY": KEY}
    code = compile(source, "<README Store>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        await result

    assert namespace["item"]["value"] == {"text": "像学姐一样亲切，讲成分不讲玄学"}
    assert namespace["found"]["items"][0]["key"] == "price"
    assert namespace["spaces"]["namespaces"] == [["brand-a", "facts"], ["brand-a", "voice"]]
    client = get_client(url=served.url, api_key=KEY)
    assert await client.store.get_item(["brand-a", "voice"], "tone") is None
    await client.store.delete_item(["brand-a", "facts"], "price")


@pytest.mark.parametrize(
    ("path", "method", "body", "answer", "statuses"),
    [
        ("/store/items", "put", "StorePut", None, {"204", "422"}),
        ("/store/items", "delete", "StoreDelete", None, {"204", "422"}),
        ("/store/items/search", "post", "StoreSearch", "StoreSearchResponse", {"200", "503"}),
        ("/store/namespaces", "post", "StoreNamespaces", "StoreNamespacesResponse", {"200"}),
    ],
)
def test_the_openapi_document_lists_the_store_routes_with_typed_bodies(
    tmp_path: Path, path: str, method: str, body: str, answer: str | None, statuses: set[str]
) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    app = create_app(service_settings(tmp_path, "http://127.0.0.1:9/v1"))
    document = TestClient(app).get("/openapi.json").json()  # no lifespan needed

    operation = document["paths"][path][method]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": f"#/components/schemas/{body}"}
    assert document["components"]["schemas"][body]["additionalProperties"] is False
    assert statuses | {"422"} <= set(operation["responses"])
    if answer is not None:
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{answer}"}
    get = document["paths"]["/store/items"]["get"]
    assert {p["name"] for p in get["parameters"]} == {"namespace", "key", "refresh_ttl"}


def test_bad_store_requests_are_422s_naming_the_field(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    bad = [
        ("PUT", "/store/items", {"namespace": [], "key": "k", "value": {}}, ["body", "namespace"]),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a.b"], "key": "k", "value": {}},
            ["body", "namespace", 0],
        ),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "", "value": {}}, ["body", "key"]),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": [1]}, ["body", "value"]),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"], "key": "k", "value": {"t": "\x00"}},
            ["body", "value"],
        ),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"], "key": "k", "value": {"n": 2**64}},
            ["body", "value"],
        ),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"], "key": "k", "value": {}, "ttl": 0},
            ["body", "ttl"],
        ),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"] * 11, "key": "k", "value": {}},
            ["body", "namespace"],
        ),
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"], "key": "k", "value": {}, "index": 0},
            ["body", "index"],
        ),
        ("POST", "/store/items/search", {"filter": {"a.b": 1}}, ["body", "filter", "a.b", "[key]"]),
        ("POST", "/store/items/search", {"filter": {"n": {"$in": [1]}}}, ["body", "filter", "n"]),
        ("POST", "/store/items/search", {"limit": 0}, ["body", "limit"]),
        ("POST", "/store/items/search", {"query": "  "}, ["body", "query"]),
        ("POST", "/store/namespaces", {"max_depth": 0}, ["body", "max_depth"]),
        ("DELETE", "/store/items", {"namespace": ["a"]}, ["body", "key"]),
    ]
    with TestClient(create_app(service_settings(tmp_path, "http://127.0.0.1:9/v1"))) as client:
        for method, path, body, loc in bad:
            response = client.request(method, path, json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.json()["detail"][0]["loc"][: len(loc)] == loc, (body, response.text)
        for namespace in ("", "a..b", "a." * 10 + "a"):
            response = client.get("/store/items", params={"namespace": namespace, "key": "k"})
            assert response.status_code == 422, namespace
            assert response.json()["detail"][0]["loc"] == ["query", "namespace"]
