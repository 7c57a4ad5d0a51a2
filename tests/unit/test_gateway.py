"""The gateway's forwarding rules: what is repeated after UNAVAILABLE, and the rate limit.

Forwarding is exercised against a real gRPC server in this process that fails
on purpose, which no real backend can be made to do on cue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gateway.forwarding import Backend
from gateway.policy import REPEATABLE, Repeat, may_repeat
from gateway.rate_limit import RateLimiter
from gateway.service import PUBLIC_SERVICES
from service_runtime.errors import ServiceError
from service_runtime.repeat import REPEAT_POLICY
from texera.lake.v1 import execution_service_pb2, warehouse_service_pb2

UNARY = "/test.Flaky/Unary"
STREAM = "/test.Flaky/Stream"


class Flaky:
    """Fails the first `failures` calls with UNAVAILABLE; a stream may fail after a message."""

    def __init__(self, failures: int, fail_mid_stream: bool = False) -> None:
        self.failures = failures
        self.fail_mid_stream = fail_mid_stream
        self.calls = 0

    async def unary(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        return b"echo:" + request

    async def stream(
        self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        self.calls += 1
        if self.fail_mid_stream:
            yield b"first"
        if self.calls <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        for index in range(3):
            yield f"{request.decode()}-{index}".encode()


async def _serve(flaky: Flaky, address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Unary": grpc.unary_unary_rpc_method_handler(flaky.unary),
        "Stream": grpc.unary_stream_rpc_method_handler(flaky.stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Flaky", handlers),))
    port = server.add_insecure_port(address)
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.mark.parametrize(("retry", "calls", "answered"), [(True, 2, True), (False, 1, False)])
async def test_a_unary_call_is_repeated_only_when_allowed(
    retry: bool, calls: int, answered: bool
) -> None:
    flaky = Flaky(failures=1)
    server, target = await _serve(flaky)
    backend = Backend(target)
    try:
        if answered:
            assert await backend.unary(UNARY, b"x", retry=retry) == b"echo:x"
        else:
            with pytest.raises(ServiceError) as error:
                await backend.unary(UNARY, b"x", retry=retry)
            assert error.value.code == grpc.StatusCode.UNAVAILABLE
            assert error.value.message == "try again"
        assert flaky.calls == calls
    finally:
        await backend.close()
        await server.stop(None)


async def test_attempts_end_after_the_policys_last() -> None:
    flaky = Flaky(failures=10)
    server, target = await _serve(flaky)
    backend = Backend(target)
    try:
        with pytest.raises(ServiceError):
            await backend.unary(UNARY, b"x", retry=True)
        assert flaky.calls == REPEAT_POLICY.max_attempts == 4
    finally:
        await backend.close()
        await server.stop(None)


async def test_a_backend_that_restarts_is_reached_by_the_next_repeatable_call() -> None:
    """Calls made while the backend is down grow the channel's reconnect backoff; once it is
    back, a repeatable call still reaches it instead of failing in the channel's wait."""
    server, target = await _serve(Flaky(failures=0))
    backend = Backend(target)
    try:
        assert await backend.unary(UNARY, b"x", retry=False) == b"echo:x"
        await server.stop(None)
        for _ in range(12):  # six seconds down: gRPC's default backoff would now be seconds long
            with pytest.raises(ServiceError) as down:
                await backend.unary(UNARY, b"x", retry=False)
            assert down.value.code == grpc.StatusCode.UNAVAILABLE
            await asyncio.sleep(0.5)
        server, _ = await _serve(Flaky(failures=0), target)
        assert await backend.unary(UNARY, b"y", retry=True) == b"echo:y"
    finally:
        await backend.close()
        await server.stop(None)


async def test_a_stream_is_repeated_before_its_first_message_only() -> None:
    flaky = Flaky(failures=1)
    server, target = await _serve(flaky)
    backend = Backend(target)
    try:
        assert [m async for m in backend.stream(STREAM, b"s", retry=True)] == [
            b"s-0",
            b"s-1",
            b"s-2",
        ]
        assert flaky.calls == 2
        broken = Flaky(failures=1, fail_mid_stream=True)
        broken_server, broken_target = await _serve(broken)
        received: list[bytes] = []

        async def read_all() -> None:
            async for message in Backend(broken_target).stream(STREAM, b"s", retry=True):
                received.append(message)

        with pytest.raises(ServiceError):
            await read_all()
        assert received == [b"first"]  # not repeated: the caller already has a message
        assert broken.calls == 1
        await broken_server.stop(None)
    finally:
        await backend.close()
        await server.stop(None)


def test_every_public_method_has_a_repeat_rule() -> None:
    for service in PUBLIC_SERVICES:
        assert set(REPEATABLE[service.full_name]) == {m.name for m in service.methods}


def test_idempotent_calls_are_the_ones_with_their_key() -> None:
    create = warehouse_service_pb2.CreateWarehouseRequest
    submit = execution_service_pb2.SubmitExecutionRequest
    assert may_repeat(Repeat.WHEN_IDEMPOTENT, create(request_id="r-1"))
    assert not may_repeat(Repeat.WHEN_IDEMPOTENT, create())
    assert may_repeat(Repeat.WHEN_IDEMPOTENT, submit(execution_id="e-1"))
    assert not may_repeat(Repeat.WHEN_IDEMPOTENT, submit(warehouse_id="w"))
    assert may_repeat(Repeat.ALWAYS, None)
    delete = warehouse_service_pb2.DeleteWarehouseRequest
    assert may_repeat(Repeat.WHEN_IDEMPOTENT, delete(warehouse_id="w", allow_missing=True))
    assert not may_repeat(Repeat.WHEN_IDEMPOTENT, delete(warehouse_id="w"))


def test_the_rate_limit_allows_bursts_then_the_average_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.admit("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.admit("alice") == pytest.approx(0.5)
    assert limiter.admit("bob") == 0.0  # each user has a bucket of their own
    now[0] = 0.5
    assert limiter.admit("alice") == 0.0
    assert limiter.admit("alice") == pytest.approx(0.5)
    now[0] = 100.0
    assert [limiter.admit("alice") for _ in range(4)][-1] > 0  # refills to the burst, no more


def test_the_rate_limit_forgets_users_beyond_its_bound() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, max_users=2, clock=lambda: 0.0)
    for user in ("a", "b", "c"):
        assert limiter.admit(user) == 0.0
    assert limiter.admit("a") == 0.0  # forgotten, so it starts full again
    assert limiter.admit("c") > 0
