"""Run tracing (engine.tracing, providers.tracing, app.composition) on the OpenTelemetry SDK.

Spans go to the SDK's in-memory exporter; the graph's LLM is `ChatOpenAI` on the
scripted OpenAI server (loopback), so the GenAI attributes are those a real
OpenAI-compatible answer gives.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util.re import parse_env_headers

from app.composition import open_tracing
from core.settings import Settings
from engine.records import RunRecord, now
from engine.spec import RunOptions
from engine.tracing import TRACE_ID_KEY, RunTracing, trace_headers
from providers.tracing import GenAISpans, tracer_provider, traces_endpoint
from tests.support.docs import code_blocks
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def make_tracing(exporter: InMemorySpanExporter, *, capture_content: bool = False) -> RunTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RunTracing(
        provider,
        lambda tracer, run_span: GenAISpans(tracer, run_span, capture_content=capture_content),
    )


def make_run() -> RunRecord:
    stamp = now()
    return RunRecord(
        run_id=str(uuid.uuid4()),
        thread_id=str(uuid.uuid4()),
        owner="o",
        assistant_id="atelier",
        status="pending",
        created_at=stamp,
        updated_at=stamp,
        options=RunOptions(input={"request": "x"}),
        multitask_strategy="reject",
        metadata={"mine": 1},
    )


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def by_name(spans: Any, name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


# -- settings -------------------------------------------------------------------------


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_tracing_is_off_without_an_endpoint_or_when_disabled() -> None:
    assert traces_endpoint(settings()) is None
    off = settings(otel_exporter_otlp_endpoint="http://127.0.0.1:4318", otel_sdk_disabled=True)
    assert traces_endpoint(off) is None
    with tracer_provider(settings()) as provider, open_tracing(settings()) as tracing:
        assert provider is None and tracing is None


def test_endpoints_follow_the_otlp_http_rules() -> None:
    base = settings(otel_exporter_otlp_endpoint="http://collector:4318/")
    assert traces_endpoint(base) == "http://collector:4318/v1/traces"
    both = settings(
        otel_exporter_otlp_endpoint="http://collector:4318",
        otel_exporter_otlp_traces_endpoint="https://cloud.langfuse.com/api/public/otel/v1/traces",
    )
    assert traces_endpoint(both) == "https://cloud.langfuse.com/api/public/otel/v1/traces"


def test_a_bad_endpoint_or_protocol_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="otel_exporter_otlp_endpoint"):
        settings(otel_exporter_otlp_endpoint="collector:4318")
    with pytest.raises(ValueError, match="otel_exporter_otlp_protocol"):
        settings(otel_exporter_otlp_protocol="grpc")


def test_the_provider_names_the_service_and_its_instance() -> None:
    configured = settings(
        otel_exporter_otlp_endpoint="http://127.0.0.1:9", otel_service_name="atelier-test"
    )
    with tracer_provider(configured) as provider:
        assert provider is not None
        assert provider.resource.attributes["service.name"] == "atelier-test"
        # The SDK's own: tells an API replica's spans from a worker's in one trace.
        assert provider.resource.attributes["service.instance.id"]


def test_trace_headers_keeps_only_w3c_trace_context() -> None:
    headers = {"traceparent": TRACEPARENT, "tracestate": "a=b", "x-api-key": "secret"}
    assert trace_headers(headers) == {"traceparent": TRACEPARENT, "tracestate": "a=b"}
    assert trace_headers({}) == {}


# -- creation, execution, feedback ---------------------------------------------------


def test_a_created_run_carries_a_child_of_the_callers_trace(
    exporter: InMemorySpanExporter,
) -> None:
    tracing = make_tracing(exporter)
    run = make_run()
    created = tracing.created(run, {"traceparent": TRACEPARENT})
    (span,) = exporter.get_finished_spans()
    assert span.name == "create_run" and span.kind == SpanKind.SERVER
    assert hex_id(span.context.trace_id, 32) == CALLER_TRACE
    assert span.parent is not None and hex_id(span.parent.span_id, 16) == CALLER_SPAN
    assert span.attributes is not None and span.attributes["atelier.run_id"] == run.run_id
    assert created.metadata == {"mine": 1, TRACE_ID_KEY: CALLER_TRACE}
    assert created.options.trace_context is not None
    traceparent = created.options.trace_context["traceparent"]
    assert traceparent == f"00-{CALLER_TRACE}-{hex_id(span.context.span_id, 16)}-01"
    assert run.metadata == {"mine": 1} and run.options.trace_context is None  # a copy


def test_a_run_created_without_a_caller_starts_its_own_trace(
    exporter: InMemorySpanExporter,
) -> None:
    created = make_tracing(exporter).created(make_run(), {})
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert created.metadata[TRACE_ID_KEY] == hex_id(span.context.trace_id, 32)


def test_an_execution_continues_the_stored_trace_and_says_its_outcome(
    exporter: InMemorySpanExporter,
) -> None:
    tracing = make_tracing(exporter)
    run = tracing.created(make_run(), {"traceparent": TRACEPARENT})
    run.attempt = 1
    with tracing.executing(run) as traced:
        assert traced.trace_id == CALLER_TRACE
        assert tracing.run_span({"run_id": run.run_id}) is traced.span
        traced.outcome = "success"
    assert tracing.run_span({"run_id": run.run_id}) is None
    create, execution = exporter.get_finished_spans()
    assert execution.name == "run atelier"
    assert execution.parent is not None
    assert execution.parent.span_id == create.context.span_id
    assert execution.attributes == {
        "atelier.run_id": run.run_id,
        "atelier.thread_id": run.thread_id,
        "atelier.assistant_id": "atelier",
        "atelier.attempt": 1,
        "atelier.outcome": "success",
    }
    assert execution.status.status_code == StatusCode.UNSET


def test_a_failed_execution_is_an_error_span_naming_only_the_error_type(
    exporter: InMemorySpanExporter,
) -> None:
    tracing = make_tracing(exporter)
    with tracing.executing(make_run()) as traced:
        traced.outcome = "error"
        traced.error = {"error": "ValueError", "message": "secret detail"}
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "ValueError"
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    assert "secret detail" not in repr(dict(span.attributes))


def test_a_stopped_execution_says_so(exporter: InMemorySpanExporter) -> None:
    tracing = make_tracing(exporter)
    with pytest.raises(RuntimeError), tracing.executing(make_run()):
        raise RuntimeError("shutdown")
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None and span.attributes["atelier.outcome"] == "stopped"
    assert span.status.status_code == StatusCode.UNSET and span.events == ()


def test_feedback_is_an_event_on_the_runs_trace(exporter: InMemorySpanExporter) -> None:
    tracing = make_tracing(exporter)
    run = tracing.created(make_run(), {"traceparent": TRACEPARENT})
    trace_id = tracing.record_feedback(run, key="quality", score=0.8, comment="清楚")
    assert trace_id == CALLER_TRACE
    create, feedback = exporter.get_finished_spans()
    assert feedback.name == "feedback quality"
    assert feedback.parent is not None and feedback.parent.span_id == create.context.span_id
    assert hex_id(feedback.context.trace_id, 32) == CALLER_TRACE
    ((event),) = feedback.events
    assert event.name == "feedback"
    assert dict(event.attributes or {}) == {
        "atelier.feedback.key": "quality",
        "atelier.feedback.score": 0.8,
        "atelier.feedback.comment": "清楚",
    }


def test_feedback_without_score_or_comment_carries_only_its_key(
    exporter: InMemorySpanExporter,
) -> None:
    tracing = make_tracing(exporter)
    run = tracing.created(make_run(), {})
    tracing.record_feedback(run, key="published")
    (event,) = exporter.get_finished_spans()[-1].events
    assert dict(event.attributes or {}) == {"atelier.feedback.key": "published"}


def test_feedback_on_a_run_recorded_untraced_exports_nothing(
    exporter: InMemorySpanExporter,
) -> None:
    tracing = make_tracing(exporter)
    assert tracing.record_feedback(make_run(), key="quality", score=1) is None
    assert exporter.get_finished_spans() == ()


# -- the graph's spans -----------------------------------------------------------------


@tool(response_format="content_and_artifact")
async def generate_image(slot: int) -> tuple[str, dict[str, Any]]:
    """Draw an image."""
    return f"drew {slot}", {"asset_id": f"asset-{slot}", "slot": slot}


class State(TypedDict, total=False):
    topic: str
    text: str
    image: str


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(lambda req: Reply.text("一篇笔记")) as server:
        yield server


def build_graph(llm: ScriptedOpenAIServer, *, ask: bool = False) -> Any:
    model = ChatOpenAI(
        base_url=llm.base_url, api_key="test", model="scripted", max_retries=0, temperature=0.3
    )

    async def writer(state: State, config: RunnableConfig) -> State:
        reply = await model.ainvoke(
            [HumanMessage(f"写 {state['topic']}")], config={"metadata": {"role": "writer"}}
        )
        return {"text": str(reply.content)}

    async def images(state: State) -> State:
        message = await generate_image.ainvoke(
            {"name": "generate_image", "args": {"slot": 1}, "id": "call-1", "type": "tool_call"}
        )
        if ask:
            interrupt("ok?")
        return {"image": str(message.content)}

    graph = StateGraph(State)
    graph.add_node("writer", writer)
    graph.add_node("images", images)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "images")
    graph.add_edge("images", END)
    return graph.compile()


async def run_graph(tracing: RunTracing, graph: Any, run: RunRecord) -> Any:
    config = {"callbacks": [tracing.callback], "metadata": {"run_id": run.run_id}}
    with tracing.executing(run) as traced:
        await graph.ainvoke({"topic": "护肤"}, config)
        traced.outcome = "success"
    return traced


async def test_nodes_llm_calls_and_images_nest_in_the_run_span(
    exporter: InMemorySpanExporter, llm: ScriptedOpenAIServer
) -> None:
    tracing = make_tracing(exporter)
    run = tracing.created(make_run(), {"traceparent": TRACEPARENT})
    await run_graph(tracing, build_graph(llm), run)
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == sorted(
        [
            "create_run",
            "run atelier",
            "writer",
            "images",
            "chat scripted",
            "execute_tool generate_image",
        ]
    )
    assert {hex_id(s.context.trace_id, 32) for s in spans} == {CALLER_TRACE}
    execution, writer, images = (by_name(spans, n) for n in ("run atelier", "writer", "images"))
    chat, image = by_name(spans, "chat scripted"), by_name(spans, "execute_tool generate_image")
    assert writer.parent is not None and writer.parent.span_id == execution.context.span_id
    assert images.parent is not None and images.parent.span_id == execution.context.span_id
    assert chat.parent is not None and chat.parent.span_id == writer.context.span_id
    assert image.parent is not None and image.parent.span_id == images.context.span_id

    assert writer.attributes is not None
    assert writer.attributes["atelier.node"] == "writer"
    assert writer.attributes["atelier.run_id"] == run.run_id
    assert chat.kind == SpanKind.CLIENT
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.system"] == "openai"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "scripted"
    assert attributes["gen_ai.request.temperature"] == 0.3
    assert attributes["atelier.role"] == "writer"
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.input.messages" not in attributes
    assert "gen_ai.output.messages" not in attributes
    assert dict(image.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "generate_image",
        "gen_ai.tool.call.id": "call-1",
        "atelier.image.slot": 1,
        "atelier.image.asset_id": "asset-1",
    }


async def test_content_is_on_spans_only_when_turned_on(
    exporter: InMemorySpanExporter, llm: ScriptedOpenAIServer
) -> None:
    tracing = make_tracing(exporter, capture_content=True)
    await run_graph(tracing, build_graph(llm), tracing.created(make_run(), {}))
    spans = exporter.get_finished_spans()
    chat = dict(by_name(spans, "chat scripted").attributes or {})
    assert "写 护肤" in chat["gen_ai.input.messages"]
    assert "一篇笔记" in chat["gen_ai.output.messages"]
    image = dict(by_name(spans, "execute_tool generate_image").attributes or {})
    assert image["gen_ai.tool.call.result"] == "drew 1"


async def test_an_interrupt_is_not_an_error_span(
    exporter: InMemorySpanExporter, llm: ScriptedOpenAIServer
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    tracing = make_tracing(exporter)
    graph = build_graph(llm, ask=True)
    graph.checkpointer = InMemorySaver()
    run = tracing.created(make_run(), {})
    config = {
        "callbacks": [tracing.callback],
        "metadata": {"run_id": run.run_id},
        "configurable": {"thread_id": run.thread_id},
    }
    with tracing.executing(run):
        await graph.ainvoke({"topic": "护肤"}, config)
    images = by_name(exporter.get_finished_spans(), "images")
    assert images.status.status_code == StatusCode.UNSET
    assert images.attributes is not None and images.attributes["atelier.interrupted"] is True


async def test_calls_outside_a_traced_run_make_no_span(
    exporter: InMemorySpanExporter, llm: ScriptedOpenAIServer
) -> None:
    tracing = make_tracing(exporter)
    await build_graph(llm).ainvoke({"topic": "护肤"}, {"callbacks": [tracing.callback]})
    assert exporter.get_finished_spans() == ()


# -- the README's settings ---------------------------------------------------------------


def test_the_readmes_tracing_settings_turn_tracing_on_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in Settings.model_fields:  # only the blocks speak (the environment wins over .env)
        if name.startswith("otel_"):
            monkeypatch.delenv(name.upper(), raising=False)
    blocks = code_blocks("tracing", "dotenv")
    endpoints = []
    for number, block in enumerate(blocks):
        env_file = tmp_path / f"{number}.env"
        env_file.write_text(block, encoding="utf-8")
        configured = Settings(_env_file=env_file)  # type: ignore[call-arg]
        endpoints.append(traces_endpoint(configured))
        headers = configured.otel_exporter_otlp_headers
        if headers is not None:  # Langfuse's: Basic auth the SDK's header parser decodes
            parsed = parse_env_headers(headers.get_secret_value(), liberal=True)
            auth = parsed["authorization"].removeprefix("Basic ")
            assert base64.b64decode(auth) == b"pk-lf-...:sk-lf-..."
            assert parsed["x-langfuse-ingestion-version"] == "4"
    assert endpoints == [
        "http://localhost:4318/v1/traces",
        "http://localhost:6006/v1/traces",
        "https://cloud.langfuse.com/api/public/otel/v1/traces",
    ]


async def test_a_sampled_out_run_makes_no_graph_spans(
    exporter: InMemorySpanExporter, llm: ScriptedOpenAIServer
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = RunTracing(provider, GenAISpans)
    run = tracing.created(make_run(), {})
    with tracing.executing(run):
        assert tracing.run_span({"run_id": run.run_id}) is None
    await run_graph(tracing, build_graph(llm), run)
    assert exporter.get_finished_spans() == ()
    assert isinstance(tracing.callback, GenAISpans)
    assert tracing.callback._spans == {} and tracing.callback._parents == {}
