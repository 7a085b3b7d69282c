"""Runs and streams over HTTP: the official `langgraph-sdk` client and raw SSE, real uvicorn.

The app serves the sample graphs (tests/app/sample_graphs.py), whose LLM calls go
to the scripted OpenAI server through the real model factory. Every test runs against
three deployments (the `server` fixture): embedded, PostgreSQL + Redis in one process,
and API replicas behind nginx with separate worker processes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError
from langgraph_sdk.schema import Command

from core.settings import Settings
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    SseFrame,
    parse_sse,
    processes_deployment,
    read_sse,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.app.sample_graphs import WRITER_TEXT, sample_assistants, scripted_reply
from tests.support.scripted_openai import ScriptedOpenAIServer, delayed
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

#: Seconds the scripted LLM takes over every answer (on top of a reply's own delay), so
#: runs are still executing while requests about them reach another process.
ANSWER_DELAY = 0.05


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    """The module's scripted LLM: the "processes" deployment's workers need its URL at start."""
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
def llm(scripted_llm: ScriptedOpenAIServer) -> ScriptedOpenAIServer:
    """The scripted LLM, its answers and counts fresh for each test."""
    scripted_llm.responder = delayed(scripted_reply, ANSWER_DELAY)
    scripted_llm.reset()
    return scripted_llm


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """Two API replicas behind nginx and two workers, as processes: one per module."""
    env = {"SSE_HEARTBEAT_INTERVAL": "0.3"}
    with processes_deployment(request, tmp_path_factory, scripted_llm.base_url, env=env) as d:
        yield d


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The app in each deployment (`serve_deployment`), with the sample graphs."""

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data", llm.base_url, sse_heartbeat_interval=0.3, **scale
        )

    with serve_deployment(request, settings, sample_assistants) as served:
        yield served


@pytest.fixture
def http(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def studio_input(**extra: Any) -> dict[str, Any]:
    return {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True, **extra}


# --------------------------------------------------------------------------- the SDK


async def test_sdk_streams_updates_custom_and_writer_tokens_with_subgraphs(
    server: Served,
) -> None:
    client = get_client(url=server.url, api_key=None)
    thread = await client.threads.create()
    parts = [
        part
        async for part in client.runs.stream(
            thread["thread_id"],
            "studio",
            input=studio_input(),
            stream_mode=["updates", "custom", "messages-tuple"],
            stream_subgraphs=True,
        )
    ]
    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "end"
    assert parts[0].data["thread_id"] == thread["thread_id"]
    assert [int(p.id) for p in parts] == list(range(1, len(parts) + 1))
    custom = [p for p in parts if p.event.startswith("custom")]
    assert {"stage.started", "stage.completed", "supervisor.route"} <= {
        p.data["type"] for p in custom
    }
    assert any(p.event.startswith("custom|executor:") for p in custom)
    tokens = [p for p in parts if p.event.startswith("messages|executor:")]
    assert "".join(p.data[0]["content"] for p in tokens) == WRITER_TEXT
    # The supervisor's answer ("ok") is tagged nostream and never reaches the stream.
    assert all(p.data[1]["tags"] == ["role:writer_agent"] for p in tokens)
    assert "updates" in events and any(e.startswith("updates|executor:") for e in events)

    runs = await client.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success"]
    # Join the finished run: its values, and a full replay of its stream.
    values = await client.runs.join(thread["thread_id"], runs[0]["run_id"])
    assert values["result"]["outcome"] == "completed"
    replay = [p async for p in client.runs.join_stream(thread["thread_id"], runs[0]["run_id"])]
    assert [(p.id, p.event, p.data) for p in replay] == [(p.id, p.event, p.data) for p in parts]
    # A subset of the run's modes.
    only = [
        p
        async for p in client.runs.join_stream(
            thread["thread_id"], runs[0]["run_id"], stream_mode="custom"
        )
    ]
    assert {p.event.split("|")[0] for p in only} == {"metadata", "custom", "end"}


async def test_sdk_v2_stream_reads_the_namespaces(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    parts = [
        part
        async for part in client.runs.stream(
            None,
            "studio",
            input=studio_input(),
            stream_mode=["custom"],
            stream_subgraphs=True,
            version="v2",
        )
    ]
    namespaced = [p for p in parts if p["type"] == "custom" and p["ns"]]
    assert namespaced and namespaced[0]["ns"][0].startswith("executor:")


async def test_sdk_cancels_a_running_run_at_once(server: Served, llm: Any) -> None:
    client = get_client(url=server.url, api_key=None)
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"], "slow", input={"steps": 30, "delay": 0.4}, stream_mode="custom"
    )
    await asyncio.to_thread(wait_until, lambda: llm.call_count >= 2)
    started = time.monotonic()
    await client.runs.cancel(thread["thread_id"], run["run_id"])
    while (await client.runs.get(thread["thread_id"], run["run_id"]))["status"] != "interrupted":
        assert time.monotonic() - started < 1.0, "not interrupted within 1 s"
        await asyncio.sleep(0.02)
    calls = llm.call_count
    await asyncio.sleep(1.0)
    assert llm.call_count == calls, "an LLM call was made after the cancel"
    frames = [p async for p in client.runs.join_stream(thread["thread_id"], run["run_id"])]
    assert frames[-1].event == "end" and frames[-1].data["status"] == "interrupted"


async def test_sdk_resumes_an_interrupted_run_with_a_command(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    thread = await client.threads.create()
    tid = thread["thread_id"]
    parts = [
        p
        async for p in client.runs.stream(
            tid, "studio", input={"request": "写点什么"}, stream_mode=["values", "updates"]
        )
    ]
    assert any(p.event == "updates" and "__interrupt__" in p.data for p in parts)
    assert any(p.event == "values" and "__interrupt__" in p.data for p in parts)
    assert parts[-1].event == "end" and parts[-1].data["status"] == "interrupted"
    state = await client.threads.get(tid)
    assert state["status"] == "interrupted"
    [pending] = [i for group in state["interrupts"].values() for i in group]
    assert pending["value"]["type"] == "clarification"

    values = await client.runs.wait(tid, "studio", command=Command(resume={"action": "defaults"}))
    assert values["result"]["outcome"] == "completed"
    assert (await client.threads.get(tid))["status"] == "idle"
    # Nothing is pending any more: a second resume is refused (the SDK's `wait` raises
    # httpx's error rather than its own typed one).
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client.runs.wait(tid, "studio", command=Command(resume="defaults"))
    assert refused.value.response.status_code == 409


async def test_sdk_busy_thread_is_rejected_naming_the_active_run(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await client.runs.create(tid, "slow", input={"steps": 5, "delay": 0.2})
    with pytest.raises(ConflictError) as refused:
        await client.runs.create(tid, "slow", input={"steps": 1})
    assert first["run_id"] in str(refused.value.body)
    await client.runs.cancel(tid, first["run_id"], wait=True)


# --------------------------------------------------------------------------- raw HTTP


def test_frames_carry_ids_and_the_run_headers(http: httpx.Client) -> None:
    response = http.post(
        "/runs/stream",
        json={
            "assistant_id": "burst",
            "input": {"count": 3},
            "stream_mode": ["custom"],
            "stream_resumable": True,
        },
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    location = response.headers["content-location"]
    assert location.startswith("/threads/") and "/runs/" in location
    assert response.headers["location"] == f"{location}/stream"
    frames = read_sse(response.text)
    assert [f.id for f in frames] == [1, 2, 3, 4, 5]
    assert [f.event for f in frames] == ["metadata", "custom", "custom", "custom", "end"]
    assert http.get(location).json()["status"] == "success"


def test_a_dropped_client_rejoins_and_gets_every_frame_exactly_once(http: httpx.Client) -> None:
    body = {"assistant_id": "burst", "input": {"count": 40, "pause": 0.02}, "stream_mode": "custom"}
    seen: list[SseFrame] = []
    with http.stream("POST", "/runs/stream", json=body) as response:
        run_path = response.headers["content-location"]
        for item in parse_sse(response.iter_lines()):
            if isinstance(item, SseFrame):
                seen.append(item)
            if len(seen) == 7:
                break  # the connection is dropped mid-run
    assert http.get(run_path).json()["status"] == "running"  # on_disconnect=continue
    last = seen[-1].id
    with http.stream("GET", f"{run_path}/stream", headers={"Last-Event-ID": str(last)}) as rest:
        seen += [f for f in parse_sse(rest.iter_lines()) if isinstance(f, SseFrame)]
    assert [f.id for f in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].event == "end"
    assert len([f for f in seen if f.event == "custom"]) == 40
    # ?last_event_id= works the same way.
    tail = read_sse(http.get(f"{run_path}/stream", params={"last_event_id": len(seen) - 2}).text)
    assert [f.id for f in tail] == [len(seen) - 1, len(seen)]


def test_on_disconnect_cancel_cancels_the_run(http: httpx.Client, llm: Any) -> None:
    body = {
        "assistant_id": "slow",
        "input": {"steps": 30, "delay": 0.3},
        "stream_mode": "custom",
        "on_disconnect": "cancel",
    }
    with http.stream("POST", "/runs/stream", json=body) as response:
        run_path = response.headers["content-location"]
        for item in parse_sse(response.iter_lines()):
            if isinstance(item, SseFrame) and item.event == "custom":
                break
    wait_until(lambda: http.get(run_path).json()["status"] == "interrupted", timeout=3)
    assert http.get(run_path).json()["cancel_reason"] == "interrupt"


def test_idle_streams_get_heartbeats(http: httpx.Client) -> None:
    body = {"assistant_id": "slow", "input": {"steps": 1, "delay": 0.8}, "stream_mode": "updates"}
    with http.stream("POST", "/runs/stream", json=body) as response:
        items = list(parse_sse(response.iter_lines()))
    assert ": heartbeat" in items
    assert [i.event for i in items if isinstance(i, SseFrame)] == ["metadata", "updates", "end"]


def test_the_same_idempotency_key_gives_one_run(http: httpx.Client) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "burst", "input": {"count": 1}}
    headers = {"Idempotency-Key": "order-42"}
    first = http.post(f"/threads/{thread}/runs", json=body, headers=headers).json()
    again = http.post(f"/threads/{thread}/runs", json=body, headers=headers).json()
    assert again["run_id"] == first["run_id"]
    assert len(http.get(f"/threads/{thread}/runs").json()) == 1
    other = http.post(
        f"/threads/{thread}/runs", json={**body, "input": {"count": 2}}, headers=headers
    )
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["message"]


def test_a_cursor_that_is_not_a_frame_id_is_refused(http: httpx.Client) -> None:
    run = http.post("/runs", json={"assistant_id": "burst", "input": {"count": 1}}).json()
    path = f"/threads/{run['thread_id']}/runs/{run['run_id']}/stream"
    response = http.get(path, headers={"Last-Event-ID": "abc"})
    assert response.status_code == 422 and "Last-Event-ID" in response.text


# --------------------------------------------------------------------------- bad input


def _nothing_created(http: httpx.Client) -> None:
    assert http.post("/threads/search", json={}).json() == []


@pytest.mark.parametrize(
    ("body", "status", "named"),
    [
        ({"assistant_id": "studio", "input": {"request": ""}}, 422, "request"),
        ({"assistant_id": "studio", "input": {"request": "   "}}, 422, "request"),
        ({"assistant_id": "studio", "input": {"request": "字" * 4001}}, 422, "request"),
        (
            {"assistant_id": "studio", "input": {"request": "x", "image_count": 10}},
            422,
            "image_count",
        ),
        ({"assistant_id": "studio", "input": {"request": "x", "colour": "red"}}, 422, "colour"),
        (
            {"assistant_id": "studio", "input": {"request": "x", "layout_preference": "wide"}},
            422,
            "layout_preference",
        ),
        (
            {"assistant_id": "studio", "input": studio_input(), "stream_mode": "events"},
            422,
            "stream_mode",
        ),
        (
            {"assistant_id": "studio", "input": studio_input(), "webhook": "http://x"},
            422,
            "webhook",
        ),
        ({"assistant_id": "nope", "input": studio_input()}, 404, "nope"),
        ({"assistant_id": "studio"}, 422, "input or command"),
        (
            {"assistant_id": "studio", "input": studio_input(), "on_disconnect": "explode"},
            422,
            "on_disconnect",
        ),
    ],
)
@pytest.mark.parametrize("endpoint", ["/runs/stream", "/runs/wait", "/runs"])
def test_bad_run_requests_are_refused_naming_the_problem_and_create_nothing(
    http: httpx.Client, endpoint: str, body: dict[str, Any], status: int, named: str
) -> None:
    response = http.post(endpoint, json=body)
    assert response.status_code == status, response.text
    assert named in response.text
    _nothing_created(http)


def test_malformed_json_is_refused(http: httpx.Client) -> None:
    response = http.post(
        "/runs/stream",
        content=b'{"assistant_id": "studio", "input": ',
        headers={"Content-Type": "application/json"},
    )
    assert 400 <= response.status_code < 500
    assert "JSON" in response.text or "json" in response.text
    _nothing_created(http)


def test_a_run_on_a_missing_thread_creates_it_only_when_asked(http: httpx.Client) -> None:
    body = {"assistant_id": "burst", "input": {"count": 1}}
    assert http.post("/threads/t-new/runs/wait", json=body).status_code == 404
    _nothing_created(http)
    answer = http.post("/threads/t-new/runs/wait", json={**body, "if_not_exists": "create"})
    assert answer.status_code == 200 and answer.json()["emitted"] == 1
    assert http.get("/threads/t-new").json()["metadata"]["graph_id"] == "burst"


def test_resume_without_a_pending_interrupt_is_refused(http: httpx.Client) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]
    response = http.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "studio", "command": {"resume": "defaults"}},
    )
    assert response.status_code == 409 and "no pending interrupt" in response.json()["message"]
    assert http.get(f"/threads/{thread}/runs").json() == []


def test_a_failed_run_streams_error_then_end(http: httpx.Client) -> None:
    frames = read_sse(
        http.post("/runs/stream", json={"assistant_id": "boom", "input": {"x": 1}}).text
    )
    assert [f.event for f in frames] == ["metadata", "values", "error", "end"]
    assert frames[2].data["error"] == "RuntimeError" and "secret" not in frames[2].data["message"]
    waited = http.post("/runs/wait", json={"assistant_id": "boom", "input": {"x": 1}}).json()
    assert waited["__error__"]["error"] == "RuntimeError"


# --------------------------------------------------------------------------- threads & owners


async def test_another_key_cannot_see_a_thread_or_its_runs(tmp_path: Path, llm: Any) -> None:
    settings = service_settings(
        tmp_path / "d", llm.base_url, auth_api_keys=["key-a" * 4, "key-b" * 4]
    )
    with LiveServer(settings, sample_assistants) as live:
        alice = get_client(url=live.url, api_key="key-a" * 4)
        bob = get_client(url=live.url, api_key="key-b" * 4)
        thread = await alice.threads.create()
        tid = thread["thread_id"]
        run = await alice.runs.create(tid, "burst", input={"count": 1})
        await alice.runs.join(tid, run["run_id"])
        calls = [
            lambda: bob.threads.get(tid),
            lambda: bob.runs.get(tid, run["run_id"]),
            lambda: bob.runs.list(tid),
            lambda: bob.runs.join(tid, run["run_id"]),  # raises httpx's error, not the SDK's
            lambda: bob.runs.create(tid, "burst", input={"count": 1}),
            lambda: bob.runs.cancel(tid, run["run_id"]),
        ]
        for call in calls:
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await call()
            assert refused.value.response.status_code == 404
        with pytest.raises(NotFoundError):
            [p async for p in bob.runs.join_stream(tid, run["run_id"])]
        assert await bob.threads.search() == []
        assert [t["thread_id"] for t in await alice.threads.search()] == [tid]


async def test_thread_state_history_and_delete(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    thread = await client.threads.create(metadata={"user": "u1"})
    tid = thread["thread_id"]
    await client.runs.wait(tid, "studio", input=studio_input())
    state = await client.threads.get_state(tid)
    assert state["values"]["result"]["outcome"] == "completed" and state["next"] == []
    history = await client.threads.get_history(tid, limit=3)
    assert len(history) == 3 and history[0]["checkpoint"]["checkpoint_id"]
    assert [t["thread_id"] for t in await client.threads.search(metadata={"user": "u1"})] == [tid]
    await client.threads.delete(tid)
    with pytest.raises(NotFoundError):
        await client.threads.get(tid)


async def test_concurrent_metadata_patches_all_land(server: Served) -> None:
    # Regression: PATCH read the thread's metadata, merged it and wrote it back, so of
    # two concurrent PATCHes one was lost.
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        created = await http.post("/threads", json={"metadata": {"user": "u1"}})
        tid = created.json()["thread_id"]
        patches = [
            http.patch(f"/threads/{tid}", json={"metadata": {f"k{i}": i}}) for i in range(10)
        ]
        assert [answer.status_code for answer in await asyncio.gather(*patches)] == [200] * 10
        metadata = (await http.get(f"/threads/{tid}")).json()["metadata"]
        assert metadata == {"user": "u1", **{f"k{i}": i for i in range(10)}}
        counted = await http.post("/threads/count", json={"metadata": {"user": "u1", "k3": 3}})
        assert counted.json() == 1


async def test_assistants_are_listed_and_drawable(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    found = await client.assistants.search()
    assert {a["assistant_id"] for a in found} == {"studio", "slow", "burst", "boom"}
    assert (await client.assistants.get("studio"))["graph_id"] == "studio"
    flat = await client.assistants.get_graph("studio")
    assert {"planner", "executor", "finalize"} <= {n["id"] for n in flat["nodes"]}
    deep = await client.assistants.get_graph("studio", xray=True)
    assert any(n["id"].startswith("executor") and n["id"] != "executor" for n in deep["nodes"])
    schemas = await client.assistants.get_schemas("studio")
    assert schemas["input_schema"]["properties"]["request"]["maxLength"] == 4000
    with pytest.raises(NotFoundError):
        await client.assistants.get("nope")


@pytest.mark.in_process_only(
    "it reads one process's counters: the runs are counted by the worker that executed "
    "them (on its own metrics port), not by the replica that answers /metrics"
)
def test_runs_and_streams_are_counted_in_the_metrics(http: httpx.Client) -> None:
    http.post("/runs/stream", json={"assistant_id": "burst", "input": {"count": 2}})
    http.post("/runs/wait", json={"assistant_id": "boom", "input": {"x": 1}})
    metrics = http.get("/metrics").text
    assert 'atelier_runs_total{status="success"} 1.0' in metrics
    assert 'atelier_runs_total{status="error"} 1.0' in metrics
    assert "atelier_active_runs 0.0" in metrics
    assert "atelier_sse_subscribers 0.0" in metrics


async def test_sdk_wait_reads_the_result_after_heartbeat_blank_lines(server: Served) -> None:
    client = get_client(url=server.url, api_key=None)
    started = time.monotonic()
    values = await client.runs.wait(None, "slow", input={"steps": 2, "delay": 0.4})
    assert time.monotonic() - started > 0.6  # longer than the 0.3 s heartbeat interval
    assert values["done"] == [1, 2]


def test_tasks_debug_and_values_modes_stream(http: httpx.Client) -> None:
    body = {
        "assistant_id": "studio",
        "input": studio_input(),
        "stream_mode": ["tasks", "debug", "values"],
    }
    frames = read_sse(http.post("/runs/stream", json=body).text)
    kinds = {f.event for f in frames}
    assert {"metadata", "tasks", "debug", "values", "end"} <= kinds
    assert frames[-1].data["status"] == "success"
    task = next(f.data for f in frames if f.event == "tasks")
    assert {"id", "name"} <= set(task)
    debug_types = {f.data["type"] for f in frames if f.event == "debug"}
    assert {"checkpoint", "task", "task_result"} <= debug_types
    # The team's tokens still reach a client that did not ask for subgraphs, un-namespaced.
    body = {"assistant_id": "studio", "input": studio_input(), "stream_mode": "messages-tuple"}
    tokens = [
        f for f in read_sse(http.post("/runs/stream", json=body).text) if f.event == "messages"
    ]
    assert "".join(f.data[0]["content"] for f in tokens) == WRITER_TEXT


def test_legacy_messages_mode_sends_metadata_then_the_message_so_far(http: httpx.Client) -> None:
    """Studio's legacy `messages` mode: Platform events, never refused (issue 14)."""
    body = {"assistant_id": "studio", "input": studio_input(), "stream_mode": "messages"}
    frames = read_sse(http.post("/runs/stream", json=body).text)
    message_frames = [f for f in frames if f.event.startswith("messages")]
    assert message_frames, [f.event for f in frames]
    assert message_frames[0].event == "messages/metadata"
    ((message_id, meta),) = message_frames[0].data.items()
    assert meta["metadata"]["tags"] == ["role:writer_agent"]
    partials = [f.data for f in message_frames if f.event == "messages/partial"]
    # Each partial holds the whole message so far: its text grows to the writer's text.
    texts = [data[0]["content"] for data in partials]
    assert all(data[0]["id"] == message_id for data in partials)
    assert texts == sorted(texts, key=len) and len(texts) > 1
    assert texts[-1] == WRITER_TEXT
    assert all(not f.event.startswith("messages|") for f in frames)
    # Asked together with messages-tuple, the tuple form wins (as on the Platform).
    body["stream_mode"] = ["messages", "messages-tuple"]
    events = {f.event for f in read_sse(http.post("/runs/stream", json=body).text)}
    assert "messages" in events and "messages/partial" not in events


def test_checkpoints_mode_names_each_checkpoint_and_its_parent(http: httpx.Client) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "studio", "input": studio_input(), "stream_mode": "checkpoints"}
    frames = read_sse(http.post(f"/threads/{thread}/runs/stream", json=body).text)
    checkpoints = [f.data for f in frames if f.event == "checkpoints"]
    assert len(checkpoints) >= 2
    for data in checkpoints:
        assert {"values", "metadata", "next", "tasks", "checkpoint", "parent_checkpoint"} <= set(
            data
        )
        assert data["checkpoint"]["thread_id"] == thread
    for parent, child in itertools.pairwise(checkpoints):
        assert child["parent_checkpoint"]["checkpoint_id"] == parent["checkpoint"]["checkpoint_id"]
    head = http.get(f"/threads/{thread}/state").json()
    assert checkpoints[-1]["checkpoint"]["checkpoint_id"] == head["checkpoint"]["checkpoint_id"]


def test_events_mode_is_refused_by_name(http: httpx.Client) -> None:
    body = {"assistant_id": "studio", "input": studio_input(), "stream_mode": ["values", "events"]}
    answer = http.post("/runs/stream", json=body)
    assert answer.status_code == 422
    assert "stream_mode" in answer.text and "events" in answer.text
