"""OpenTelemetry for Atelier: the tracer provider, and the spans of nodes, LLM calls and tools.

`tracer_provider(settings)` opens the OpenTelemetry SDK's `TracerProvider` with an
OTLP/HTTP exporter when an endpoint is configured, flushed as the block ends; with
none it yields None: no provider, no exporter, no span anywhere. The provider is the
caller's, never installed as OpenTelemetry's global one, so two servers in one
process (tests) each export where their own settings say.

`GenAISpans` is the LangChain callback handler that turns a run's graph into spans:
one per LangGraph node, per LLM call (the OpenTelemetry GenAI semantic conventions,
plus `atelier.role`) and per tool call; content only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. The settings and every
span's attributes: docs/tracing.md.

Why a callback handler rather than OpenInference's LangChain instrumentor: the
instrumentor patches LangChain's callback manager process-wide (every app and
provider in the process is traced by the first one instrumented), and its spans
carry OpenInference's attributes (`llm.token_count.prompt`, …), not the GenAI
conventions tracing backends now read. Atelier already hands every run's config its
callbacks (`ExecutorSetup.callbacks`), so a handler scoped to one provider is a
smaller part than the instrumentor plus a processor rewriting its attributes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langgraph.errors import GraphBubbleUp
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.re import parse_env_headers

from core.settings import Settings
from providers.usage import call_role, response_tokens

#: Spans (and untraced LangChain runs) remembered at once; the oldest go first, so a
#: callback that never ends (a crashed process's) cannot grow the tables forever.
MAX_TRACKED = 10_000
#: The image agent's tool: its spans also say which image they drew.
IMAGE_TOOL = "generate_image"
#: What an OTLP exporter appends to OTEL_EXPORTER_OTLP_ENDPOINT (the OTLP/HTTP spec).
TRACES_PATH = "/v1/traces"


def traces_endpoint(settings: Settings) -> str | None:
    """Return the URL spans are exported to, or None when tracing is off."""
    if not settings.tracing_enabled:
        return None
    if settings.otel_exporter_otlp_traces_endpoint:
        return settings.otel_exporter_otlp_traces_endpoint
    assert settings.otel_exporter_otlp_endpoint is not None
    return settings.otel_exporter_otlp_endpoint.rstrip("/") + TRACES_PATH


@contextmanager
def tracer_provider(settings: Settings) -> Iterator[TracerProvider | None]:
    """Open the tracer provider `settings` configure for the block (None: tracing is off).

    Spans are batched (`BatchSpanProcessor`) and exported over OTLP/HTTP; the block's
    end flushes what is left and stops the exporter.
    """
    endpoint = traces_endpoint(settings)
    if endpoint is None:
        yield None
        return
    secret = settings.otel_exporter_otlp_headers
    headers = parse_env_headers(secret.get_secret_value(), liberal=True) if secret else None
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.otel_service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, headers=headers))
    )
    try:
        yield provider
    finally:
        provider.shutdown()


def error_type(error: BaseException) -> str:
    """Return what a span says about an error: its class, never its message (may hold data)."""
    return type(error).__name__


def _text(content: Any) -> str:
    """Return a message's content as text (a list of parts joined, other parts as JSON)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part if isinstance(part, str) else str(part.get("text", "")) for part in content
        )
    return json.dumps(content, ensure_ascii=False, default=str)


def _messages(messages: Sequence[Any]) -> str:
    """Return chat messages in the GenAI conventions' shape: role and text parts, as JSON."""
    return json.dumps(
        [
            {
                "role": getattr(m, "type", "user"),
                "parts": [{"type": "text", "content": _text(getattr(m, "content", m))}],
            }
            for m in messages
        ],
        ensure_ascii=False,
    )


def _remember(table: dict[UUID, Any], key: UUID, value: Any) -> None:
    if len(table) >= MAX_TRACKED:
        table.pop(next(iter(table)))
    table[key] = value


class GenAISpans(BaseCallbackHandler):
    """Make a span of every LangGraph node, LLM call and tool call of a traced run.

    Every span is a child of the nearest enclosing one: a node's LLM calls and tools
    of that node, a subgraph's nodes of the node that runs the subgraph, and a run's
    outermost nodes of the run's span, which `run_span` finds from the config's
    metadata (`run_id`). Chains that are not nodes (the graph itself, a node's
    writers and routers, a prompt pipeline) get no span of their own: their children
    go to their nearest traced ancestor. A call outside any traced run makes no span.

    Run inline: it only starts and ends spans (the SDK's batch processor exports them
    from its own thread), and it must see calls in the order they happen.
    """

    run_inline = True
    raise_error = False

    def __init__(
        self,
        tracer: Tracer,
        run_span: Callable[[Mapping[str, Any] | None], Span | None],
        *,
        capture_content: bool = False,
    ) -> None:
        """Make spans with `tracer`; `run_span` finds a run's span from a call's metadata.

        Args:
            tracer: The tracer of the deployment's provider.
            run_span: Returns the span of the run a call belongs to, or None.
            capture_content: Put prompts, completions and tool input/output on spans.
        """
        self.tracer = tracer
        self.run_span = run_span
        self.capture_content = capture_content
        #: Spans this handler started, by LangChain run id.
        self._spans: dict[UUID, Span] = {}
        #: The span each LangChain run's children nest in (its own, or an ancestor's).
        self._parents: dict[UUID, Span] = {}

    # -- nesting ---------------------------------------------------------------------

    def _parent(
        self, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None
    ) -> Span | None:
        if parent_run_id is not None and parent_run_id in self._parents:
            return self._parents[parent_run_id]
        return self.run_span(metadata)

    def _start(
        self,
        run_id: UUID,
        parent: Span,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
    ) -> Span:
        span = self.tracer.start_span(
            name, context=trace.set_span_in_context(parent), kind=kind, attributes=attributes
        )
        _remember(self._spans, run_id, span)
        _remember(self._parents, run_id, span)
        return span

    def _end(self, run_id: UUID, error: BaseException | None = None) -> Span | None:
        self._parents.pop(run_id, None)
        span = self._spans.pop(run_id, None)
        if span is None:
            return None
        if isinstance(error, GraphBubbleUp):  # an interrupt() or a Command to a parent graph
            span.set_attribute("atelier.interrupted", True)
        elif error is not None:
            span.set_attribute("error.type", error_type(error))
            span.set_status(Status(StatusCode.ERROR, error_type(error)))
        span.end()
        return span

    # -- nodes -----------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a node's span; remember where the children of any other chain nest."""
        parent = self._parent(parent_run_id, metadata)
        if parent is None:
            return
        node = (metadata or {}).get("langgraph_node")
        if isinstance(node, str) and kwargs.get("name") == node and not node.startswith("__"):
            attributes: dict[str, Any] = {"atelier.node": node, "langgraph.node": node}
            step = (metadata or {}).get("langgraph_step")
            if isinstance(step, int):
                attributes["langgraph.step"] = step
            run = (metadata or {}).get("run_id")
            if isinstance(run, str):
                attributes["atelier.run_id"] = run
            self._start(run_id, parent, node, SpanKind.INTERNAL, attributes)
        else:
            _remember(self._parents, run_id, parent)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """End a node's span."""
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End a node's span with its error (an interrupt is not one)."""
        self._end(run_id, error)

    # -- LLM calls -------------------------------------------------------------------

    def _llm_start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: Mapping[str, Any] | None,
        tags: Sequence[str] | None,
        invocation: Mapping[str, Any],
        content: str | None,
    ) -> None:
        parent = self._parent(parent_run_id, metadata)
        if parent is None:
            return
        meta = metadata or {}
        model = str(invocation.get("model") or meta.get("ls_model_name") or "unknown")
        system = str(meta.get("ls_provider") or "openai")
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_SYSTEM: system,
            gen_ai.GEN_AI_PROVIDER_NAME: system,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
            "atelier.role": call_role(meta, tags),
        }
        for key, name in (
            ("temperature", gen_ai.GEN_AI_REQUEST_TEMPERATURE),
            ("max_tokens", gen_ai.GEN_AI_REQUEST_MAX_TOKENS),
        ):
            value = invocation.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        if content is not None:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = content
        self._start(run_id, parent, f"chat {model}", SpanKind.CLIENT, attributes)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a chat model call's span."""
        content = _messages(messages[0] if messages else []) if self.capture_content else None
        invocation = kwargs.get("invocation_params") or {}
        self._llm_start(run_id, parent_run_id, metadata, tags, invocation, content)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a completion model call's span."""
        content = _messages(prompts) if self.capture_content else None
        invocation = kwargs.get("invocation_params") or {}
        self._llm_start(run_id, parent_run_id, metadata, tags, invocation, content)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """End a call's span with its tokens, finish reasons and response model."""
        span = self._spans.get(run_id)
        if span is None:
            return
        tokens = response_tokens(response)
        if tokens is not None:
            span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, tokens[0])
            span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, tokens[1])
        reasons: list[str] = []
        outputs: list[Any] = []
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                meta = getattr(message, "response_metadata", None) or {}
                reason = (generation.generation_info or {}).get("finish_reason") or meta.get(
                    "finish_reason"
                )
                if reason:
                    reasons.append(str(reason))
                if meta.get("model_name"):
                    span.set_attribute(gen_ai.GEN_AI_RESPONSE_MODEL, str(meta["model_name"]))
                if meta.get("id"):
                    span.set_attribute(gen_ai.GEN_AI_RESPONSE_ID, str(meta["id"]))
                outputs.append(message if message is not None else generation.text)
        if reasons:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
        if self.capture_content:
            span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _messages(outputs))
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End a failed (or cancelled) call's span with the error's type."""
        self._end(run_id, error)

    # -- tools (images) ----------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a tool call's span (an image for `generate_image`)."""
        parent = self._parent(parent_run_id, metadata)
        if parent is None:
            return
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
            gen_ai.GEN_AI_TOOL_NAME: name,
        }
        if kwargs.get("tool_call_id"):
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = str(kwargs["tool_call_id"])
        if name == IMAGE_TOOL and isinstance((inputs or {}).get("slot"), int):
            attributes["atelier.image.slot"] = (inputs or {})["slot"]
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = input_str
        self._start(run_id, parent, f"execute_tool {name}", SpanKind.INTERNAL, attributes)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """End a tool call's span (with the stored image's asset id)."""
        span = self._spans.get(run_id)
        if span is None:
            return
        artifact = getattr(output, "artifact", None)
        if isinstance(artifact, Mapping) and artifact.get("asset_id"):
            span.set_attribute("atelier.image.asset_id", str(artifact["asset_id"]))
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", _text(getattr(output, "content", output)))
        self._end(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End a failed tool call's span with the error's type."""
        self._end(run_id, error)
