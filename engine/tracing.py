"""One OpenTelemetry trace per run, across the API replica that records it and the executor.

`open_run_tracing(settings)` yields a `RunTracing` when an OTLP endpoint is configured
(`providers.tracing.tracer_provider`), else None; the composition roots (the app's
lifespan, `atelier worker`) open it and hand it to the engine in `ExecutorSetup`.
With None, nothing below runs: no span, no context read or stored.

A run's trace:

    create_run                  (SERVER) where the run is recorded: its parent is the
    │                           caller's `traceparent`/`tracestate`, if the request
    │                           that created the run sent them (a cron's tick: none)
    └─ run <assistant>          the execution (one per attempt), in whichever process
       │                        executes it: atelier.run_id, thread_id,
       │                        assistant_id, attempt, outcome
       ├─ <node>                a LangGraph node (a subgraph's nodes nest in its node)
       │  ├─ chat <model>       an LLM call, GenAI conventions (providers.tracing)
       │  └─ execute_tool generate_image   an image drawn
       └─ …
    feedback <key>              a reader's feedback, recorded later (`record_feedback`)

The trace context travels with the run record: `RunPreparer` stores the W3C headers
of the `create_run` span in the run's kwargs (`trace_context`), and its trace id in
the run's metadata (`trace_id`, what `GET /threads/{t}/runs/{r}` shows; it replaces
a client's own `trace_id` metadata key). Whoever executes the run (this process, or
a scale-out worker that claimed it) starts the run span from that context, so the
API's span and the worker's share one trace id. The run's `metadata` stream frame
carries the same `trace_id`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.settings import Settings
from engine.records import RunRecord
from providers.tracing import GenAISpans, tracer_provider

#: The W3C Trace Context headers a run request may carry (lower case, as ASGI has them).
TRACE_HEADERS = ("traceparent", "tracestate")
#: Run kwargs key of the stored trace context; run metadata key of the trace id.
CONTEXT_KEY = "trace_context"
TRACE_ID_KEY = "trace_id"

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Return the W3C Trace Context headers among a request's headers."""
    return {name: headers[name] for name in TRACE_HEADERS if headers.get(name)}


def _trace_id(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")


def _carrier(span: Span) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _run_attributes(run: RunRecord) -> dict[str, Any]:
    return {
        "atelier.run_id": run.run_id,
        "atelier.thread_id": run.thread_id,
        "atelier.assistant_id": run.assistant_id,
    }


@dataclasses.dataclass
class TracedRun:
    """A run's execution span, as `RunTracing.executing` hands it out."""

    span: Span
    #: Its trace id, 32 hex digits (the `metadata` frame's `trace_id`).
    trace_id: str
    #: How the execution ended (`Outcome.status`), once it did; None: it was stopped.
    outcome: str | None = None
    #: The public error it ended with (`{"error": …, "message": …}`), if any.
    error: Mapping[str, Any] | None = None


class RunTracing:
    """The spans of runs, on one tracer provider (see the module docstring)."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False) -> None:
        """Make spans with `provider`'s tracers; `capture_content` as `GenAISpans` takes it."""
        self.provider = provider
        self.tracer = provider.get_tracer("atelier.engine")
        self._runs: dict[str, Span] = {}
        #: The LangChain callback making the node, LLM and tool spans of traced runs.
        self.callback = GenAISpans(
            provider.get_tracer("atelier.graph"), self.run_span, capture_content=capture_content
        )

    def run_span(self, metadata: Mapping[str, Any] | None) -> Span | None:
        """Return the span of the run a LangChain call's metadata (`run_id`) names.

        None for a run the sampler left out (OTEL_TRACES_SAMPLER): its graph makes no
        spans at all, rather than spans nobody records.
        """
        run_id = (metadata or {}).get("run_id")
        span = self._runs.get(run_id) if isinstance(run_id, str) else None
        return span if span is not None and span.is_recording() else None

    def created(self, run: RunRecord, headers: Mapping[str, str]) -> RunRecord:
        """Record the `create_run` span of a new run; return the run carrying its context.

        Args:
            run: The run about to be recorded (pending).
            headers: The caller's W3C Trace Context headers (`trace_headers`), maybe none.
        """
        parent = _PROPAGATOR.extract(dict(headers)) if headers else None
        span = self.tracer.start_span(
            "create_run", context=parent, kind=SpanKind.SERVER, attributes=_run_attributes(run)
        )
        span.end()
        return dataclasses.replace(
            run,
            kwargs={**run.kwargs, CONTEXT_KEY: _carrier(span)},
            metadata={**run.metadata, TRACE_ID_KEY: _trace_id(span)},
        )

    @contextmanager
    def executing(self, run: RunRecord) -> Iterator[TracedRun]:
        """Hold the span of one execution of `run` for the block (the block sets the outcome).

        The span continues the trace stored with the run (a run recorded with tracing
        off starts a trace of its own) and is the current span in the block, so the
        graph's spans, and those of any OpenTelemetry-instrumented library, nest in it.
        """
        stored = run.kwargs.get(CONTEXT_KEY)
        parent = _PROPAGATOR.extract(stored) if isinstance(stored, dict) else None
        span = self.tracer.start_span(
            f"run {run.assistant_id}", context=parent, attributes=_run_attributes(run)
        )
        traced = TracedRun(span, _trace_id(span))
        self._runs[run.run_id] = span
        try:
            # No exception recorded: its message may hold data (the outcome says enough).
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                yield traced
        finally:
            self._runs.pop(run.run_id, None)
            span.set_attribute("atelier.attempt", run.attempt)
            span.set_attribute("atelier.outcome", traced.outcome or "stopped")
            if traced.error is not None:
                kind = str(traced.error.get("error") or "error")
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
            span.end()

    def record_feedback(
        self,
        run: RunRecord,
        *,
        key: str,
        score: float | int | bool | str | None = None,
        comment: str | None = None,
    ) -> str | None:
        """Export a reader's feedback on a run as a `feedback` event on the run's trace.

        The run's span has ended by then, so the event goes on a short `feedback <key>`
        span, a child of the run's stored trace context (its `create_run` span).

        Returns:
            The trace id the feedback went to; None for a run recorded with tracing off
            (it has no trace, and nothing is exported).
        """
        stored = run.kwargs.get(CONTEXT_KEY)
        if not isinstance(stored, dict):
            return None
        event: dict[str, Any] = {"atelier.feedback.key": key}
        if score is not None:
            event["atelier.feedback.score"] = score
        if comment:
            event["atelier.feedback.comment"] = comment
        span = self.tracer.start_span(
            f"feedback {key}",
            context=_PROPAGATOR.extract(stored),
            attributes={**_run_attributes(run), **event},
        )
        span.add_event("feedback", event)
        span.end()
        return _trace_id(span)


@contextmanager
def open_run_tracing(settings: Settings) -> Iterator[RunTracing | None]:
    """Open the run tracing `settings` configure for the block (None: tracing is off).

    The block's end flushes the spans not yet exported.
    """
    with tracer_provider(settings) as provider:
        if provider is None:
            yield None
        else:
            yield RunTracing(
                provider,
                capture_content=settings.otel_instrumentation_genai_capture_message_content,
            )
