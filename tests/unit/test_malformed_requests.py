"""Requests that do not decode are INVALID_ARGUMENT with ErrorInfo, on every handler a service
runs (generated servicers, health, reflection, handlers that relay bytes), never grpc's own
UNKNOWN; on a real grpc.aio server in this process."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor

from service_runtime import undecodable, wire
from service_runtime.auth import bearer, mint_token
from service_runtime.server import RunningServer, ServiceBinding
from tests.in_process import serving
from tests.wire_garbage import CORRUPT_REQUESTS, assert_malformed
from texera.lake.v1 import (
    computing_unit_service_pb2,
    result_service_pb2,
    result_service_pb2_grpc,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

WAREHOUSES = warehouse_service_pb2.DESCRIPTOR.services_by_name["WarehouseService"]
RESULTS = result_service_pb2.DESCRIPTOR.services_by_name["ResultService"]
UNITS = computing_unit_service_pb2.DESCRIPTOR.services_by_name["ComputingUnitService"]
METHODS = [*WAREHOUSES.methods, *RESULTS.methods]


class Warehouses(warehouse_service_pb2_grpc.WarehouseServiceServicer):
    """Every method the generated base's: UNIMPLEMENTED, should a request reach it."""


class Results(result_service_pb2_grpc.ResultServiceServicer):
    pass


async def _echo(request: bytes, call: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return request


def _relaying(servicer: object, server_: grpc.aio.Server) -> None:
    """ComputingUnitService.GetComputingUnit as the gateway serves methods: the request's bytes
    checked and handed over as they came (echoed here)."""
    method = UNITS.methods_by_name["GetComputingUnit"]
    handlers = {
        method.name: grpc.unary_unary_rpc_method_handler(
            _echo,
            request_deserializer=undecodable.checked(
                computing_unit_service_pb2.GetComputingUnitRequest
            ),
            response_serializer=wire.serialize,
        )
    }
    wire.add_handlers(handlers, UNITS, server_)


@pytest.fixture
async def server(jwt_secret: str) -> AsyncIterator[RunningServer]:
    async with serving(
        [
            ServiceBinding.of(Warehouses()),  # type: ignore[abstract]
            ServiceBinding.of(Results()),  # type: ignore[abstract]
            ServiceBinding(UNITS.full_name, None, _relaying),
        ],
        jwt_secret,
    ) as running:
        yield running


@pytest.fixture
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as opened:
        yield opened


async def _call(
    channel: grpc.aio.Channel, path: str, request: bytes, *, streaming: bool, **kwargs: Any
) -> list[bytes]:
    """The call with the request's bytes as they are; its answers' bytes."""
    if streaming:
        stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
        return [message async for message in stream(request, **kwargs)]
    unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
    return [await unary(request, **kwargs)]


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


@pytest.mark.parametrize("corrupt", CORRUPT_REQUESTS)
async def test_every_method_answers_corrupt_bytes_invalid_argument(
    channel: grpc.aio.Channel, jwt_secret: str, corrupt: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    metadata = (bearer(mint_token(jwt_secret, "alice")),)
    for method in METHODS:
        call = partial(_call, channel, _path(method), corrupt, streaming=method.server_streaming)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call(metadata=metadata)
        assert_malformed(error.value)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_health_and_reflection_answer_corrupt_bytes_invalid_argument(
    channel: grpc.aio.Channel,
) -> None:
    check: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        "/grpc.health.v1.Health/Check"
    )
    with pytest.raises(grpc.aio.AioRpcError) as health:
        await check(b"\x0f")
    assert_malformed(health.value)

    async def corrupt() -> AsyncIterator[bytes]:
        yield b"\x0f"

    reflection: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    )
    with pytest.raises(grpc.aio.AioRpcError) as reflected:
        _ = [message async for message in reflection(corrupt())]
    assert_malformed(reflected.value)


async def test_a_caller_without_a_valid_token_is_refused_before_its_bytes_are_looked_at(
    channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _call(channel, _path(WAREHOUSES.methods[0]), b"\x0f", streaming=False)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_relayed_bytes_are_checked_and_handed_over_as_they_came(
    channel: grpc.aio.Channel, jwt_secret: str
) -> None:
    path = _path(UNITS.methods_by_name["GetComputingUnit"])
    metadata = (bearer(mint_token(jwt_secret, "alice")),)
    sent = computing_unit_service_pb2.GetComputingUnitRequest(
        computing_unit_id="cu-1"
    ).SerializeToString()
    assert await _call(channel, path, sent, streaming=False, metadata=metadata) == [sent]
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _call(channel, path, b"\x0a\x10abc", streaming=False, metadata=metadata)
    assert_malformed(error.value)
