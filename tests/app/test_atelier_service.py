"""Acceptance of the service with the real `atelier` pipeline (issue 4).

A real uvicorn on 127.0.0.1 serves `create_app(settings)` with its default
assistants; every LLM call goes through the real model factory to the scripted
OpenAI server (`tests/app/atelier_llm.py`), which counts calls. The official
`langgraph-sdk` client drives it where a client would. Every test runs against three
deployments (the `server` fixture): embedded, PostgreSQL + Redis in one process, and
the real `atelier serve --workers 0` replicas behind nginx with `atelier worker`s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import Command
from pydantic import TypeAdapter

from core.events import PipelineEvent
from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    SseFrame,
    parse_sse,
    processes_deployment,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer, delayed
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
KEY = "acceptance-key-0123456789"


def writer_requests(llm: ScriptedOpenAIServer) -> int:
    return len([r for r in llm.requests if not r.tools])


class Gate:
    """A responder wrapper that holds the writer's answers until released."""

    def __init__(self, inner: Callable[[ChatRequest], Reply], delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def __call__(self, req: ChatRequest) -> Reply:
        reply = self.inner(req)
        if not req.tools and self.delay:
            return Reply.delay(self.delay, reply)
        return reply


@pytest.fixture
def gate() -> Gate:
    return Gate(atelier_responder(), delay=0.0)


#: Seconds the scripted LLM takes over every answer (on top of a reply's own delay), so
#: runs are still executing while requests about them reach another process.
ANSWER_DELAY = 0.05


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    """The module's scripted LLM: the "processes" deployment's workers need its URL at start."""
    with ScriptedOpenAIServer(atelier_responder()) as server:
        yield server


@pytest.fixture
def llm(scripted_llm: ScriptedOpenAIServer, gate: Gate) -> ScriptedOpenAIServer:
    """The scripted LLM answering through this test's gate, its counts fresh."""
    scripted_llm.responder = delayed(gate, ANSWER_DELAY)
    scripted_llm.reset()
    return scripted_llm


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {"AUTH_API_KEYS": KEY, "LLM_TIMEOUT": "30", "SSE_HEARTBEAT_INTERVAL": "15"}
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The service in each deployment (`serve_deployment`), with the real atelier pipeline."""

    def settings(**scale: Any) -> Settings:
        return service_settings(tmp_path / "data", llm.base_url, auth_api_keys=[KEY], **scale)

    # None: the default assistants (atelier)
    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


@pytest.fixture
def sdk(server: Served) -> Any:
    return get_client(url=server.url, api_key=KEY)


@pytest.fixture
def http(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"X-Api-Key": KEY}) as client:
        yield client


async def test_sdk_streams_a_whole_pipeline_run(sdk: Any) -> None:
    thread = await sdk.threads.create()
    parts = [
        part
        async for part in sdk.runs.stream(
            thread["thread_id"],
            "atelier",
            input={"request": REQUEST, "auto_confirm": True},
            stream_mode=["updates", "custom", "messages-tuple"],
            stream_subgraphs=True,
        )
    ]
    assert parts[0].event == "metadata" and parts[-1].event == "end"
    assert parts[-1].data["status"] == "success"
    assert [int(p.id) for p in parts] == list(range(1, len(parts) + 1))

    custom = [p for p in parts if p.event.split("|")[0] == "custom"]
    types = {p.data["type"] for p in custom}
    assert {
        "stage.started",
        "stage.completed",
        "attempt.started",
        "knowledge.injected",
        "supervisor.route",
        "critic.verdict",
        "attempt.completed",
        "asset.created",
    } <= types
    routes = [p for p in custom if p.data["type"] == "supervisor.route"]
    assert all(p.event.startswith("custom|executor:") for p in routes)
    adapter: TypeAdapter[Any] = TypeAdapter(PipelineEvent)
    for part in custom:  # every pipeline event is one of the documented models
        adapter.validate_python(part.data)

    tokens = [p for p in parts if p.event.split("|")[0] == "messages"]
    assert tokens, "the writer's tokens reach the stream"
    assert {p.data[1]["langgraph_node"] for p in tokens} == {"writer_agent"}

    run_id = parts[0].data["run_id"]
    values = await sdk.runs.join(thread["thread_id"], run_id)
    assert values["result"]["outcome"] == "completed"
    assert values["result"]["post"]["title"]


async def test_sdk_answers_the_clarification_and_the_run_completes(sdk: Any) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    parts = [
        p
        async for p in sdk.runs.stream(
            tid, "atelier", input={"request": "写点东西"}, stream_mode=["updates"]
        )
    ]
    interrupt = next(p.data["__interrupt__"] for p in parts if "__interrupt__" in p.data)
    assert interrupt[0]["value"]["type"] == "clarification"
    assert parts[-1].data["status"] == "interrupted"
    assert (await sdk.threads.get(tid))["status"] == "interrupted"

    resumed = [
        p
        async for p in sdk.runs.stream(
            tid, "atelier", command=Command(resume="defaults"), stream_mode=["updates"]
        )
    ]
    assert resumed[-1].data["status"] == "success"
    state = await sdk.threads.get_state(tid)
    assert state["values"]["result"]["outcome"] in ("completed", "exhausted")


async def test_sdk_cancel_stops_llm_work_within_a_second(
    sdk: Any, llm: ScriptedOpenAIServer, gate: Gate
) -> None:
    gate.delay = 30  # the writer hangs until cancelled
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(tid, "atelier", input={"request": REQUEST, "auto_confirm": True})
    await asyncio.to_thread(wait_until, lambda: writer_requests(llm) >= 1, 30)
    calls = llm.call_count
    started = time.monotonic()
    await sdk.runs.cancel(tid, run["run_id"])
    while (await sdk.runs.get(tid, run["run_id"]))["status"] != "interrupted":
        assert time.monotonic() - started < 1.0, "not interrupted within 1 s"
        await asyncio.sleep(0.02)
    await asyncio.sleep(1.0)
    assert llm.call_count == calls, "an LLM call was made after the cancel"


def test_busy_thread_409_and_idempotency_key(http: httpx.Client, gate: Gate) -> None:
    gate.delay = 30
    tid = http.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "atelier", "input": {"request": REQUEST, "auto_confirm": True}}
    first = http.post(f"/threads/{tid}/runs", json=body, headers={"Idempotency-Key": "k-1"})
    again = http.post(f"/threads/{tid}/runs", json=body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["run_id"] == first.json()["run_id"]
    busy = http.post(f"/threads/{tid}/runs", json=body)
    assert busy.status_code == 409 and first.json()["run_id"] in busy.json()["message"]
    assert len(http.get(f"/threads/{tid}/runs").json()) == 1
    http.post(f"/threads/{tid}/runs/{first.json()['run_id']}/cancel", params={"wait": 1})


def test_a_dropped_stream_is_rejoined_without_loss_or_repeat(
    http: httpx.Client, gate: Gate
) -> None:
    body = {
        "assistant_id": "atelier",
        "input": {"request": REQUEST, "auto_confirm": True},
        "stream_mode": ["updates", "custom", "messages-tuple"],
        "stream_subgraphs": True,
    }
    seen: list[SseFrame] = []
    with http.stream("POST", "/runs/stream", json=body) as response:
        run_path = response.headers["content-location"]
        for item in parse_sse(response.iter_lines()):
            if isinstance(item, SseFrame):
                seen.append(item)
            if len(seen) == 12:
                break
    with http.stream(
        "GET", f"{run_path}/stream", headers={"Last-Event-ID": str(seen[-1].id)}
    ) as rest:
        seen += [f for f in parse_sse(rest.iter_lines()) if isinstance(f, SseFrame)]
    assert [f.id for f in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].event == "end" and seen[-1].data["status"] == "success"
    with http.stream("GET", f"{run_path}/stream") as full:
        replay = [f for f in parse_sse(full.iter_lines()) if isinstance(f, SseFrame)]
    assert replay == seen


@pytest.mark.parametrize(
    ("body", "status", "named"),
    [
        ({"assistant_id": "atelier", "input": {"request": ""}}, 422, "request"),
        ({"assistant_id": "atelier", "input": {"request": "字" * 4001}}, 422, "request"),
        (
            {"assistant_id": "atelier", "input": {"request": REQUEST}, "stream_mode": ["tokens"]},
            422,
            "stream_mode",
        ),
        ({"assistant_id": "ghost", "input": {"request": REQUEST}}, 404, "ghost"),
    ],
)
def test_bad_inputs_get_a_4xx_naming_the_problem_and_leave_nothing(
    http: httpx.Client, body: dict[str, Any], status: int, named: str
) -> None:
    response = http.post("/runs/stream", json=body)
    assert response.status_code == status and named in response.text
    assert http.post("/threads/search", json={}).json() == []


def test_malformed_json_oversize_body_and_wrong_key(http: httpx.Client, server: Served) -> None:
    bad_json = http.post(
        "/runs/stream",
        content=b'{"assistant_id": "atelier", "input": {',
        headers={"Content-Type": "application/json"},
    )
    assert bad_json.status_code == 422 and "json" in bad_json.text.lower()
    huge = {"assistant_id": "atelier", "input": {"request": "x" * 2_000_000}}
    too_big = http.post("/runs/stream", json=huge)
    assert too_big.status_code == 413
    wrong = httpx.post(
        f"{server.url}/runs/stream",
        json={"assistant_id": "atelier", "input": {"request": REQUEST}},
        headers={"X-Api-Key": "not-the-key"},
    )
    assert wrong.status_code == 401 and "API key" in wrong.json()["message"]
    assert http.post("/threads/search", json={}).json() == []
