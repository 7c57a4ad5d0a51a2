"""OpenTelemetry traces of the mesh's calls.

Every service process sets its tracer provider up from its settings: spans go to an
OpenTelemetry collector when ``TRACE_OTLP_ENDPOINT`` is set, and as JSON lines to standard
error (the service's log) when ``TRACE_CONSOLE`` is on, as the embedded stack does. With
neither, no provider is installed and spans cost next to nothing.

Calls between services carry the W3C trace context in their metadata (service_runtime.propagation
puts it there, the gRPC instrumentation's server interceptor takes it up), so one
execution's spans form one trace across the gateway, the registry, the computing unit and the
result service. Spans name what happens and carry ids, never rows, tokens or credentials.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service_runtime.config import ServerSettings

#: Health checks and reflection are polled, not worth a trace each.
_TRACED_CALLS = filters.negate(
    filters.any_of(filters.health_check(), filters.service_prefix("grpc.reflection."))
)


class JsonLinesExporter(SpanExporter):
    """Writes each finished span as one JSON line (``"logger": "trace"``) to a stream."""

    def __init__(self, service: str, stream: Any = None) -> None:
        self._service = service
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(self._service, span)) + "\n" for span in spans)
        with self._lock:
            self._stream.write(lines)
            self._stream.flush()
        return SpanExportResult.SUCCESS


def span_record(service: str, span: ReadableSpan) -> dict[str, Any]:
    """A finished span as the flat record the JSON-lines exporter writes."""
    context = span.get_span_context()
    assert context is not None
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "logger": "trace",
        "service": service,
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else "",
        "start_ns": start,
        "duration_ms": round((end - start) / 1e6, 3),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def configure_tracing(service: str, settings: ServerSettings) -> TracerProvider | None:
    """Installs the process's tracer provider as the settings say; None when traces go
    nowhere."""
    if not settings.trace_otlp_endpoint and not settings.trace_console:
        return None
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    if settings.trace_otlp_endpoint:
        # Imported here: only a process that exports to a collector pays for the exporter.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        endpoint = settings.trace_otlp_endpoint
        provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
            )
        )
    if settings.trace_console:
        # Written as each span ends, so that a trace is complete in the log when a call is.
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(service)))
    trace.set_tracer_provider(provider)
    return provider


def server_interceptor() -> grpc.aio.ServerInterceptor:
    """Starts a span for each served call, continuing the caller's trace. Only the trace
    context crosses the mesh: W3C baggage a caller sends is neither taken up nor passed on."""
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
        filter_=_TRACED_CALLS
    )
    return interceptor


def trace_metadata() -> list[tuple[str, str]]:
    """The current span's trace context as gRPC metadata (W3C ``traceparent``), for a call
    to another service; empty outside any span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())
