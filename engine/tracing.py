"""One OpenTelemetry trace per run, across the API replica that records it and the executor.

Whoever opens the engine hands it a `RunTracing` when tracing is on (the product's
composition opens the tracer provider, `app.composition`), else None: then nothing
below runs, no span, no context read or stored.

A run's trace: a `create_run` span where the run is recorded (a child of the
caller's `traceparent`, if its request sent one), then one `run <assistant>` span
per execution, in whichever process executes it, in which the graph's spans nest
(the node, LLM and tool spans of the callback the opener's caller provides), and
later `feedback <key>` spans. The trace context travels with the run record
(`RunOptions.trace_context`; its trace id in the run's metadata, `trace_id`), so
the API's span and a worker's share one trace id. See docs/tracing.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from engine.records import RunRecord

#: The W3C Trace Context headers a run request may carry (lower case, as ASGI has them).
TRACE_HEADERS = ("traceparent", "tracestate")
#: Run metadata key of the trace id.
TRACE_ID_KEY = "trace_id"
#: Returns the span of the run a LangChain call's metadata names (None: not traced).
SpanOf = Callable[[Mapping[str, Any] | None], Span | None]
#: Makes the LangChain callback that turns a traced run's graph into spans.
GraphSpans = Callable[[Tracer, SpanOf], BaseCallbackHandler]

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

    def __init__(self, provider: TracerProvider, graph_spans: GraphSpans) -> None:
        """Make spans with `provider`'s tracers; the graphs' spans with `graph_spans`' callback."""
        self.provider = provider
        self.tracer = provider.get_tracer("atelier.engine")
        self._runs: dict[str, Span] = {}
        #: The LangChain callback making the node, LLM and tool spans of traced runs.
        self.callback = graph_spans(provider.get_tracer("atelier.graph"), self.run_span)

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
            options=dataclasses.replace(run.options, trace_context=_carrier(span)),
            metadata={**run.metadata, TRACE_ID_KEY: _trace_id(span)},
        )

    @contextmanager
    def executing(self, run: RunRecord) -> Iterator[TracedRun]:
        """Hold the span of one execution of `run` for the block (the block sets the outcome).

        The span continues the trace stored with the run (a run recorded with tracing
        off starts a trace of its own) and is the current span in the block, so the
        graph's spans, and those of any OpenTelemetry-instrumented library, nest in it.
        """
        stored = run.options.trace_context
        parent = _PROPAGATOR.extract(dict(stored)) if stored else None
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
        stored = run.options.trace_context
        if not stored:
            return None
        event: dict[str, Any] = {"atelier.feedback.key": key}
        if score is not None:
            event["atelier.feedback.score"] = score
        if comment:
            event["atelier.feedback.comment"] = comment
        span = self.tracer.start_span(
            f"feedback {key}",
            context=_PROPAGATOR.extract(dict(stored)),
            attributes={**_run_attributes(run), **event},
        )
        span.add_event("feedback", event)
        span.end()
        return _trace_id(span)
