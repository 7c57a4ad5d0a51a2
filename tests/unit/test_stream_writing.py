"""A server stream its client cancels ends as a cancelled call, logged at INFO, with no ERROR
from grpc or the tracing interceptor; on a real grpc.aio server in this process, traced as the
services are."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from service_runtime import wire
from service_runtime.auth import bearer, mint_token
from service_runtime.server import RunningServer, ServiceBinding
from tests.in_process import serving
from texera.lake.v1 import result_service_pb2

RESULTS = result_service_pb2.DESCRIPTOR.services_by_name["ResultService"]
STREAM = RESULTS.methods_by_name["StreamResult"]
CHUNK = b"x" * 1_000_000


async def _endless(
    request: bytes, call: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[bytes]:
    while True:
        yield CHUNK


def _streaming(servicer: object, server: grpc.aio.Server) -> None:
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_stream_rpc_method_handler(
        _endless, response_serializer=wire.serialize
    )
    wire.add_handlers({STREAM.name: handler}, RESULTS, server)


@pytest.fixture
async def server(jwt_secret: str) -> AsyncIterator[RunningServer]:
    async with serving(
        [ServiceBinding(RESULTS.full_name, None, _streaming)], jwt_secret, traced=True
    ) as running:
        yield running


async def test_a_cancelled_stream_is_an_info_line_and_no_error(
    server: RunningServer, jwt_secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    metadata = (bearer(mint_token(jwt_secret, "alice")),)
    options = [("grpc.max_receive_message_length", -1)]
    calls = 5
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=options) as channel:
        stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            f"/{RESULTS.full_name}/{STREAM.name}"
        )
        for _ in range(calls):
            call = stream(b"", metadata=metadata, timeout=30)
            assert await call.read() == CHUNK
            await asyncio.sleep(0.3)  # the server fills the flow-control window, then waits
            call.cancel()
        await asyncio.sleep(0.5)
    gc.collect()  # what was left suspended would be closed now
    await asyncio.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finished = [r for r in caplog.records if r.getMessage() == "rpc finished"]
    assert [(r.levelname, getattr(r, "code", None)) for r in finished] == [
        ("INFO", "CANCELLED")
    ] * calls
