"""An OTLP/HTTP trace receiver on loopback, for the tracing tests.

`OtlpReceiver` serves `POST /v1/traces` on 127.0.0.1 (a stdlib HTTP server in a
thread), decodes each `ExportTraceServiceRequest` protobuf with `opentelemetry.proto`
(as Jaeger, Phoenix or Langfuse would) and keeps the spans it carried, flattened
into `ReceivedSpan`s.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


@dataclass
class ReceivedSpan:
    """One exported span, its ids as hex strings (parent "" for a root)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class OtlpReceiver:
    """A loopback OTLP/HTTP (protobuf) trace receiver; a context manager."""

    def __init__(self) -> None:
        """Receive nothing yet; `start` (or `with`) serves."""
        self.spans: list[ReceivedSpan] = []
        #: Export requests received (each a batch of spans).
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._keep(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The OTEL_EXPORTER_OTLP_ENDPOINT to export to (the base URL)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            events=[(e.name, _attributes(e.attributes)) for e in span.events],
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        """Return the spans received so far."""
        with self._lock:
            return list(self.spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 20
    ) -> list[ReceivedSpan]:
        """Wait until the spans received satisfy `predicate`; return them (AssertionError)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.received()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise AssertionError(f"spans never matched; {len(spans)} received: {names}")
            time.sleep(0.05)

    def start(self) -> OtlpReceiver:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OtlpReceiver:
        """Start serving."""
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        """Stop serving."""
        self.stop()
