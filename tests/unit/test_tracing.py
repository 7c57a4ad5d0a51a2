"""Trace spans as the services write them, and the trace context a call passes on."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator

import pytest
from opentelemetry import baggage, context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service_runtime.auth import UserTokenVerifier
from service_runtime.config import ServerSettings
from service_runtime.interceptors import ServerInterceptor
from service_runtime.propagation import context_metadata
from service_runtime.server import RunningServer, ServiceProcess
from service_runtime.tracing import (
    JsonLinesExporter,
    configure_tracing,
    server_interceptor,
    trace_metadata,
)


def _provider(*exporters: object) -> TracerProvider:
    provider = TracerProvider()
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    return provider


def test_no_provider_without_a_destination() -> None:
    assert configure_tracing("gateway", ServerSettings()) is None


def test_spans_are_json_lines_naming_their_parent() -> None:
    stream = io.StringIO()
    tracer = _provider(JsonLinesExporter("cu-service", stream)).get_tracer("test")
    with (
        tracer.start_as_current_span("execution", attributes={"execution.id": "e-1"}) as outer,
        tracer.start_as_current_span("commit"),
    ):
        pass
    child, parent = (json.loads(line) for line in stream.getvalue().splitlines())
    outer_context = outer.get_span_context()
    assert parent["name"] == "execution"
    assert child["name"] == "commit"
    assert parent["trace_id"] == child["trace_id"] == f"{outer_context.trace_id:032x}"
    assert child["parent_id"] == parent["span_id"] == f"{outer_context.span_id:016x}"
    assert parent["parent_id"] == ""
    assert parent["service"] == "cu-service"
    assert parent["logger"] == "trace"
    assert parent["attributes"] == {"execution.id": "e-1"}
    assert parent["duration_ms"] >= child["duration_ms"] >= 0


def test_calls_made_within_a_span_carry_its_trace() -> None:
    assert trace_metadata() == []
    tracer = _provider(InMemorySpanExporter()).get_tracer("test")
    with tracer.start_as_current_span("submit") as span:
        context = span.get_span_context()
        [(key, value)] = trace_metadata()
        assert key == "traceparent"
        assert value.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
        assert (key, value) in context_metadata()


@contextlib.contextmanager
def context_of(values: context.Context) -> Iterator[None]:
    token = context.attach(values)
    try:
        yield
    finally:
        context.detach(token)


def test_only_the_trace_context_crosses_the_mesh() -> None:
    server_interceptor()
    tracer = _provider(InMemorySpanExporter()).get_tracer("test")
    with (
        context_of(baggage.set_baggage("user-said", "x" * 100)),
        tracer.start_as_current_span("call"),
    ):
        assert [key for key, _ in trace_metadata()] == ["traceparent"]


@pytest.mark.parametrize("traced", [True, False])
async def test_a_server_traces_calls_only_when_spans_go_somewhere(traced: bool) -> None:
    process = ServiceProcess(
        name="test",
        settings=ServerSettings(host="127.0.0.1", port=0),
        authenticator=UserTokenVerifier("s" * 40),
        services=[],
    )
    server = RunningServer(process, traced=traced)
    kinds = [type(interceptor).__module__ for interceptor in server.interceptors]
    assert any(kind.startswith("opentelemetry.") for kind in kinds) is traced
    assert ServerInterceptor in map(type, server.interceptors)
