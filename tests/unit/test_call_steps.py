"""The server interceptor's steps: each around the next in order, admitted in turn until one
refuses (then the handler never runs and the call ends with the step's error), on a real
grpc.aio server in this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from service_runtime.auth import AuthenticationError, Identity
from service_runtime.call_steps import CallScope, CallStep, ErrorMapping, ServicerContext
from service_runtime.errors import ServiceError
from service_runtime.interceptors import ServerInterceptor

METHOD = "/test.Steps/Call"


class Recording(CallStep):
    def __init__(self, name: str, events: list[str]) -> None:
        self._name = name
        self._events = events

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        self._events.append(f"{self._name} enters")
        yield
        self._events.append(f"{self._name} leaves")

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        self._events.append(f"{self._name} admits")
        return True


class Refusing(CallStep):
    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        scope.error = ServiceError(grpc.StatusCode.PERMISSION_DENIED, "refused by a step")
        return False


class _Nobody:
    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        raise AuthenticationError("unused")


async def _serve(steps: list[CallStep], events: list[str]) -> tuple[grpc.aio.Server, str]:
    async def handle(request: bytes, call: ServicerContext) -> bytes:
        events.append("handler")
        return request

    handler = grpc.method_handlers_generic_handler(
        "test.Steps", {"Call": grpc.unary_unary_rpc_method_handler(handle)}
    )
    server = grpc.aio.server(interceptors=[ServerInterceptor(_Nobody(), steps)])
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _call(target: str) -> bytes:
    async with grpc.aio.insecure_channel(target) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(METHOD)
        return await call(b"ping", timeout=10)


async def test_steps_run_each_around_the_next_then_the_handler() -> None:
    events: list[str] = []
    server, target = await _serve([Recording("a", events), Recording("b", events)], events)
    try:
        assert await _call(target) == b"ping"
    finally:
        await server.stop(None)
    assert events == [
        "a enters",
        "b enters",
        "a admits",
        "b admits",
        "handler",
        "b leaves",
        "a leaves",
    ]


async def test_a_refusing_step_ends_the_call_with_its_error_before_the_handler() -> None:
    events: list[str] = []
    steps = [ErrorMapping(), Recording("a", events), Refusing(), Recording("b", events)]
    server, target = await _serve(steps, events)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _call(target)
    finally:
        await server.stop(None)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details() == "refused by a step"
    assert "handler" not in events
    assert "b admits" not in events
