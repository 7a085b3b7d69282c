"""Acceptance of assistants as brand presets (issue 25), with the official Python SDK.

The real `atelier` pipeline runs on the scripted OpenAI server (`tests/app/atelier_llm.py`),
whose request log shows what the writer was told, against each deployment the service
suites use (`serve_deployment`: embedded, scale-out in one process, API replicas and
workers as processes). The JS SDK's flows are in `tests/app/test_js_sdk.py`.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.support.docs import code_block
from tests.support.fake_models import HAPPY_BODY, README_REQUEST
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

KEY = "assistants-key-0123456789"
OTHER = "assistants-other-0123456789"
#: A term the scripted writer's post uses: a preset that must avoid it fails the critic.
USED_TERM = "营销"
assert USED_TERM in HAPPY_BODY
PRESET = {
    "brand_name": "青禾护肤",
    "voice": "像学姐一样亲切，讲成分不讲玄学",
    "audience": "大学生",
    "must_include": ["氨基酸"],
    "must_avoid": [USED_TERM],
    "critic_pass_threshold": 0.5,
}
RUN_INPUT = {"request": README_REQUEST, "auto_confirm": True, "fast_mode": True}


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    """The module's scripted LLM: the "processes" deployment's workers need its URL at start."""
    with ScriptedOpenAIServer(atelier_responder()) as server:
        yield server


@pytest.fixture
def llm(scripted_llm: ScriptedOpenAIServer) -> ScriptedOpenAIServer:
    scripted_llm.reset()
    return scripted_llm


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {"AUTH_API_KEYS": f"{KEY},{OTHER}", "LLM_TIMEOUT": "30"}
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data", llm.base_url, auth_api_keys=[KEY, OTHER], **scale
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


@pytest.fixture
def sdk(server: Served) -> Any:
    return get_client(url=server.url, api_key=KEY)


@pytest.fixture
def other(server: Served) -> Any:
    return get_client(url=server.url, api_key=OTHER)


def writer_systems(llm: ScriptedOpenAIServer) -> list[str]:
    """Return the system prompts of the writer's requests (the one role bound to no tool)."""
    return [
        str(r.messages[0].get("content") or "")
        for r in llm.requests
        if not r.tools and r.messages and r.messages[0].get("role") == "system"
    ]


async def run_preset(sdk: Any, assistant_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the assistant to its end on a new thread; return the thread and its values."""
    thread = await sdk.threads.create()
    values = await sdk.runs.wait(thread["thread_id"], assistant_id, input=RUN_INPUT)
    return thread, values


async def test_a_preset_shapes_the_writer_and_the_critic(
    sdk: Any, llm: ScriptedOpenAIServer
) -> None:
    created = await sdk.assistants.create(
        "atelier", context=PRESET, metadata={"brand": "qinghe"}, name="青禾"
    )
    assert created["version"] == 1 and created["graph_id"] == "atelier"
    assert created["context"] == PRESET
    thread, values = await run_preset(sdk, created["assistant_id"])

    systems = writer_systems(llm)
    assert systems, "the writer was asked"
    assert all(PRESET["voice"] in s and "青禾护肤" in s and USED_TERM in s for s in systems)
    # The preset's audience and terms fill the input (the run's own input sets none).
    assert values["audience"] == "大学生"
    assert values["brand"]["voice"] == PRESET["voice"]
    checks = values["verdict"]["checks"]
    must_avoid = next(c for c in checks if c["name"] == "must_avoid")
    assert must_avoid["passed"] is False and USED_TERM in str(must_avoid["measured"])
    assert values["result"]["outcome"] != "completed"
    assert values["verdict"]["threshold"] == PRESET["critic_pass_threshold"]

    runs = await sdk.runs.list(thread["thread_id"])
    assert [r["assistant_id"] for r in runs] == [created["assistant_id"]]
    labels = (await sdk.threads.get(thread["thread_id"]))["metadata"]
    assert labels["assistant_id"] == created["assistant_id"] and labels["graph_id"] == "atelier"
    schemas = await sdk.assistants.get_schemas(created["assistant_id"])
    assert set(schemas["context_schema"]["properties"]) >= set(PRESET)


async def test_the_runs_input_overrides_the_preset_field_by_field(
    sdk: Any, llm: ScriptedOpenAIServer
) -> None:
    created = await sdk.assistants.create("atelier", context=PRESET)
    thread = await sdk.threads.create()
    values = await sdk.runs.wait(
        thread["thread_id"],
        created["assistant_id"],
        input={**RUN_INPUT, "audience": "上班族", "constraints": {"must_avoid": []}},
    )
    assert values["audience"] == "上班族"
    checks = values["verdict"]["checks"]
    assert all(c["passed"] for c in checks if c["name"] == "must_avoid")
    assert all(PRESET["voice"] in s for s in writer_systems(llm))


async def test_versions_roll_back_and_delete_keeps_the_threads(
    sdk: Any, other: Any, llm: ScriptedOpenAIServer
) -> None:
    first = await sdk.assistants.create(
        "atelier", context={"voice": "第一版语气"}, metadata={"brand": "beans"}
    )
    aid = first["assistant_id"]
    second = await sdk.assistants.update(aid, context={"voice": "第二版语气"})
    assert second["version"] == 2 and second["metadata"] == {"brand": "beans"}
    await run_preset(sdk, aid)
    assert all("第二版语气" in s for s in writer_systems(llm))

    assert (await sdk.assistants.set_latest(aid, 1))["version"] == 1
    llm.reset()
    thread, _ = await run_preset(sdk, aid)
    systems = writer_systems(llm)
    assert systems and all("第一版语气" in s and "第二版语气" not in s for s in systems)

    versions = await sdk.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [2, 1]
    found = await sdk.assistants.search(metadata={"brand": "beans"})
    assert [a["assistant_id"] for a in found] == [aid]
    assert await sdk.assistants.count(metadata={"brand": "beans"}) == 1
    listed = [a["assistant_id"] for a in await sdk.assistants.search(limit=100)]
    assert {"atelier", "team", aid} <= set(listed)

    # Another API key sees none of it.
    with pytest.raises(NotFoundError):
        await other.assistants.get(aid)
    with pytest.raises(NotFoundError):
        await other.assistants.update(aid, context={"voice": "x"})
    with pytest.raises(httpx.HTTPStatusError) as refused:  # runs.wait raises httpx's own
        await other.runs.wait(None, aid, input=RUN_INPUT)
    assert refused.value.response.status_code == 404
    assert await other.assistants.search(metadata={"brand": "beans"}) == []
    assert await other.assistants.count(graph_id="atelier") == 1  # the built-in one

    await sdk.assistants.delete(aid)
    with pytest.raises(NotFoundError):
        await sdk.assistants.get(aid)
    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["values"]["brand"]["voice"] == "第一版语气"


def test_bad_presets_and_built_in_assistants_are_refused(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30, headers={"X-Api-Key": KEY}) as http:
        unknown = http.post(
            "/assistants", json={"graph_id": "atelier", "context": {"voice": "x", "tone": 1}}
        )
        assert unknown.status_code == 422, unknown.text
        assert "context.tone" in unknown.text
        bound = http.post(
            "/assistants", json={"graph_id": "atelier", "context": {"image_count": 12}}
        )
        assert bound.status_code == 422 and "context.image_count" in bound.text
        configured = http.post(
            "/assistants",
            json={"graph_id": "atelier", "config": {"configurable": {"title_max": -1}}},
        )
        assert configured.status_code == 422
        assert "config.configurable.title_max" in configured.text
        graph = http.post("/assistants", json={"graph_id": "nope"})
        assert graph.status_code == 422 and "graph_id" in graph.text
        assert http.post("/assistants/search", json={}).status_code == 200
        for method, path, body in (
            ("PATCH", "/assistants/atelier", {"name": "x"}),
            ("DELETE", "/assistants/team", None),
            ("POST", "/assistants/atelier/latest", {"version": 1}),
        ):
            refused = http.request(method, path, json=body)
            assert refused.status_code == 409, (path, refused.text)
            assert "read-only" in refused.json()["message"]
        taken = http.post("/assistants", json={"graph_id": "atelier", "assistant_id": "atelier"})
        assert taken.status_code == 409
        made = http.post(
            "/assistants", json={"graph_id": "team", "assistant_id": "my-team", "context": {"a": 1}}
        )
        assert made.status_code == 200, made.text
        again = http.post(
            "/assistants",
            json={"graph_id": "team", "assistant_id": "my-team", "if_exists": "do_nothing"},
        )
        assert again.status_code == 200 and again.json()["context"] == {"a": 1}
        assert (
            http.post(
                "/assistants", json={"graph_id": "team", "assistant_id": "my-team"}
            ).status_code
            == 409
        )
        assert http.post("/assistants/my-team/latest", json={"version": 9}).status_code == 404
        assert http.get("/assistants/my-team/schemas").json()["context_schema"] is None
        # A cron may name a created assistant (a preset works too); another key's may not.
        preset = http.post("/assistants", json={"graph_id": "atelier", "context": PRESET}).json()
        cron = {"assistant_id": preset["assistant_id"], "schedule": "0 9 * * *", "input": RUN_INPUT}
        made_cron = http.post("/runs/crons", json=cron)
        assert made_cron.status_code == 200, made_cron.text
        assert made_cron.json()["assistant_id"] == preset["assistant_id"]
        assert http.delete(f"/runs/crons/{made_cron.json()['cron_id']}").status_code == 204
        foreign = http.post("/runs/crons", json=cron, headers={"X-Api-Key": OTHER})
        assert foreign.status_code == 404, foreign.text
        assert http.delete("/assistants/my-team").status_code == 204
        assert http.delete("/assistants/my-team").status_code == 404


def readme_snippet() -> str:
    """Return the Python snippet of the "Brand presets" page (docs/presets.md)."""
    return code_block("presets", "python")


async def test_the_readme_snippet_runs_as_written(
    server: Served, llm: ScriptedOpenAIServer
) -> None:
    # As a notebook runs it: top-level await, `KEY` defined; only the URL is this server's.
    snippet = readme_snippet().replace("http://localhost:8000", server.url)
    namespace: dict[str, Any] = {"KEY": KEY}
    code = compile(snippet, "<README Brand presets>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        await result
    assert [v["version"] for v in namespace["versions"]] == [2, 1]
    assert [a["assistant_id"] for a in namespace["found"]] == [namespace["brand"]["assistant_id"]]
    assert namespace["found"][0]["version"] == 1  # rolled back
    assert namespace["values"]["brand"]["brand_name"] == "青禾护肤"
    assert any("少用感叹号" in s for s in writer_systems(llm))
    sdk = get_client(url=server.url, api_key=KEY)
    with pytest.raises(NotFoundError):
        await sdk.assistants.get(namespace["brand"]["assistant_id"])
