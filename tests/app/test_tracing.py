"""Acceptance of run tracing (issue 27): OpenTelemetry spans reach an OTLP/HTTP receiver.

The service runs the real `atelier` pipeline on the scripted OpenAI server, in the
three deployments (`serve_deployment`), exporting to `tests.support.otlp.OtlpReceiver`
on loopback, which decodes the protobuf export requests as a tracing backend would.
One run with a `traceparent` is one trace under the caller's span: its `create_run`
span (where the API recorded it), the run span (where it executed: a worker process
in the "processes" deployment), a span per node and per LLM call. Without an endpoint,
or with OTEL_SDK_DISABLED, nothing is exported.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    SseFrame,
    parse_sse,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
KEY = "tracing-key-0123456789abcdef"
#: Exports every 100 ms (the SDK's default is 5 s), so the receiver sees spans soon.
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture(scope="module", autouse=True)
def quick_export() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in QUICK_EXPORT.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
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
    receiver: OtlpReceiver,
) -> Iterator[Any]:
    """API replicas and workers as processes, every one exporting to the receiver."""
    env = {
        "AUTH_API_KEYS": KEY,
        "LLM_TIMEOUT": "30",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        **QUICK_EXPORT,
    }
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    llm: ScriptedOpenAIServer,
    receiver: OtlpReceiver,
) -> Iterator[Served]:
    def settings(**scale: Any) -> Any:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[KEY],
            otel_exporter_otlp_endpoint=receiver.endpoint,
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


def stream_run(url: str, headers: dict[str, str]) -> tuple[list[SseFrame], dict[str, Any]]:
    """Stream one pipeline run (updates of every graph level); return its frames and record."""
    with httpx.Client(base_url=url, timeout=120, headers={"X-Api-Key": KEY}) as http:
        thread = http.post("/threads", json={}).json()
        body = {
            "assistant_id": "atelier",
            "input": {"request": REQUEST, "auto_confirm": True},
            "stream_mode": ["updates"],
            "stream_subgraphs": True,
        }
        path = f"/threads/{thread['thread_id']}/runs/stream"
        with http.stream("POST", path, json=body, headers=headers) as response:
            assert response.status_code == 200
            frames = [f for f in parse_sse(response.iter_lines()) if isinstance(f, SseFrame)]
        run_id = frames[0].data["run_id"]
        record = http.get(f"/threads/{thread['thread_id']}/runs/{run_id}").json()
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    return frames, record


def nodes_run(frames: list[SseFrame]) -> Counter[str]:
    """Count the node executions the run's `updates` frames report, at every graph level."""
    return Counter(
        node
        for frame in frames
        if frame.event.split("|")[0] == "updates"
        for node in frame.data
        if not node.startswith("__")
    )


def test_one_run_is_one_trace_under_the_callers_span(
    request: pytest.FixtureRequest,
    server: Served,
    llm: ScriptedOpenAIServer,
    receiver: OtlpReceiver,
) -> None:
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    traceparent = f"00-{caller_trace}-{caller_span}-01"
    frames, record = stream_run(server.url, {"traceparent": traceparent})
    run_id = record["run_id"]
    assert frames[0].data["trace_id"] == caller_trace  # the metadata frame
    assert record["metadata"]["trace_id"] == caller_trace  # the run record
    nodes = nodes_run(frames)
    assert {"planner", "executor", "writer_agent", "critic"} <= set(nodes)

    def complete(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == caller_trace]
        names = {s.name for s in mine}
        node_spans = [s for s in mine if "atelier.node" in s.attributes]
        return {"create_run", "run atelier"} <= names and len(node_spans) >= nodes.total()

    spans = [s for s in receiver.wait_for(complete) if s.trace_id == caller_trace]
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)

    (create,) = [s for s in spans if s.name == "create_run"]
    (execution,) = [s for s in spans if s.name == "run atelier"]
    assert create.parent_span_id == caller_span  # the caller's span is the root's parent
    assert execution.parent_span_id == create.span_id
    assert execution.attributes["atelier.run_id"] == run_id
    assert execution.attributes["atelier.thread_id"] == record["thread_id"]
    assert execution.attributes["atelier.assistant_id"] == "atelier"
    assert execution.attributes["atelier.attempt"] == 1
    assert execution.attributes["atelier.outcome"] == "success"
    for span in spans:  # every other span hangs off a span of the same trace
        if span is not create:
            assert span.parent_span_id in by_id, f"{span.name} has an unknown parent"

    node_spans = [s for s in spans if "atelier.node" in s.attributes]
    assert Counter(s.name for s in node_spans) == nodes  # every node execution, once
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == llm.call_count  # every LLM call
    for chat in chats:
        assert by_id[chat.parent_span_id].attributes.get("atelier.node")
        assert chat.attributes["gen_ai.system"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["atelier.role"] != "unknown"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"]
        assert "gen_ai.input.messages" not in chat.attributes  # no content by default
    images = [s for s in spans if s.name == "execute_tool generate_image"]
    assert images and all(s.attributes.get("atelier.image.asset_id") for s in images)

    if request.node.callspec.params["server"] == "processes":
        # Recorded by an API replica, executed by a worker process: one trace still.
        assert create.resource["service.instance.id"] != execution.resource["service.instance.id"]

    # A reader's feedback on the finished run joins the run's trace as an event.
    with httpx.Client(base_url=server.url, timeout=30, headers={"X-Api-Key": KEY}) as http:
        body = {"key": "quality", "score": 1, "comment": "好看"}
        assert http.post(f"/runs/{run_id}/feedback", json=body).status_code == 200

    def has_feedback(spans: list[ReceivedSpan]) -> bool:
        return any(s.trace_id == caller_trace and s.name == "feedback quality" for s in spans)

    (feedback,) = [
        s
        for s in receiver.wait_for(has_feedback)
        if s.trace_id == caller_trace and s.name == "feedback quality"
    ]
    assert feedback.parent_span_id == create.span_id
    ((event, attributes),) = feedback.events
    assert event == "feedback"
    assert attributes["atelier.feedback.key"] == "quality"
    assert attributes["atelier.feedback.score"] == 1


@pytest.mark.parametrize("setting", ["unset", "disabled"])
def test_without_an_otel_setting_nothing_is_exported(
    setting: str, tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    with OtlpReceiver() as receiver:
        otel: dict[str, Any] = {}
        if setting == "disabled":
            otel = {"otel_exporter_otlp_endpoint": receiver.endpoint, "otel_sdk_disabled": True}
        settings = service_settings(tmp_path / "data", llm.base_url, auth_api_keys=[KEY], **otel)
        with LiveServer(settings, None) as live:
            frames, record = stream_run(
                live.url, {"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"}
            )
        assert "trace_id" not in frames[0].data
        assert "trace_id" not in record["metadata"]
        assert "trace_context" not in record["kwargs"]
        assert receiver.requests == 0
