"""The server interceptor, on a real grpc.aio server in this process.

The handlers here are test doubles standing in for the services' own (which
later issues build); the interceptor, server bootstrap and client channel are
the real ones every service runs.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import jwt
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2

from service_runtime import context
from service_runtime.auth import UserTokenVerifier, bearer, mint_token
from service_runtime.config import ServerSettings
from service_runtime.errors import FieldViolations, Resource, not_found, status_details
from service_runtime.logs import JsonFormatter
from service_runtime.metrics import HANDLED
from service_runtime.propagation import service_channel
from service_runtime.server import RunningServer, ServiceBinding, ServiceProcess
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2, warehouse_service_pb2_grpc

CANARY = "canary-secret-3e8b1f0c9d"
SERVICE = "texera.lake.v1.WarehouseService"
Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


async def _create(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
    violations = FieldViolations()
    violations.check(
        bool(request.warehouse.storage.bucket), "warehouse.storage.bucket", "is required"
    )
    violations.check(bool(request.warehouse.display_name), "warehouse.display_name", "is required")
    violations.raise_if_any()
    warehouse = warehouse_pb2.Warehouse(
        display_name=request.warehouse.display_name,
        owner_user_id=context.current_identity().user_id,
        warehouse_id=context.request_id_var.get(),
    )
    return warehouse_service_pb2.CreateWarehouseResponse(warehouse=warehouse)


async def _get(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
    if request.warehouse_id == "boom":
        raise RuntimeError(f"database password is {CANARY}")
    if request.warehouse_id == "slow":
        await asyncio.sleep(1.0)
    if request.warehouse_id == "missing":
        raise not_found(Resource.WAREHOUSE, "missing")
    return warehouse_service_pb2.GetWarehouseResponse(
        warehouse=warehouse_pb2.Warehouse(warehouse_id=request.warehouse_id)
    )


def _binding(handlers: dict[str, Handler]) -> ServiceBinding:
    request_types: dict[str, Any] = {
        "CreateWarehouse": warehouse_service_pb2.CreateWarehouseRequest,
        "GetWarehouse": warehouse_service_pb2.GetWarehouseRequest,
    }

    def add(servicer: object, server: grpc.aio.Server) -> None:
        method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            name: grpc.unary_unary_rpc_method_handler(
                handler,
                request_deserializer=request_types[name].FromString,
                response_serializer=lambda message: message.SerializeToString(),
            )
            for name, handler in handlers.items()
        }
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(SERVICE, method_handlers)]
        )

    return ServiceBinding(SERVICE, None, add)


async def _start(secret: str, handlers: dict[str, Handler]) -> RunningServer:
    settings = ServerSettings(host="127.0.0.1", port=0, shutdown_grace_seconds=5.0)
    server = RunningServer(
        ServiceProcess(
            name="test",
            settings=settings,
            authenticator=UserTokenVerifier(secret),
            services=[_binding(handlers)],
        )
    )
    await server.start()
    return server


@pytest.fixture
async def server(jwt_secret: str) -> AsyncIterator[RunningServer]:
    running = await _start(jwt_secret, {"CreateWarehouse": _create, "GetWarehouse": _get})
    yield running
    await running.stop()


@pytest.fixture
async def stub(
    server: RunningServer,
) -> AsyncIterator[warehouse_service_pb2_grpc.WarehouseServiceAsyncStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield warehouse_service_pb2_grpc.WarehouseServiceStub(channel)


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Everything logged, as the services format it, at DEBUG (requests included)."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(JsonFormatter("test"))
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield output
    root.removeHandler(handler)
    root.setLevel(previous_level)


def _bearer(token: str) -> tuple[tuple[str, str]]:
    return (bearer(token),)


def _valid_request() -> warehouse_service_pb2.CreateWarehouseRequest:
    return warehouse_service_pb2.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name="results",
            storage=warehouse_pb2.S3StorageProfile(bucket="b-1", region="us-east-1"),
        ),
        credentials=warehouse_pb2.S3Credentials(
            access_key_id="AKIAEXAMPLE", secret_access_key=CANARY
        ),
    )


@pytest.mark.parametrize(
    "make_metadata",
    [
        pytest.param(lambda secret: (), id="no token"),
        pytest.param(lambda secret: _bearer(mint_token("x" * 40, "alice")), id="bad signature"),
        pytest.param(
            lambda secret: _bearer(
                jwt.encode({"sub": "alice", "exp": int(time.time()) - 1}, secret, "HS256")
            ),
            id="expired",
        ),
        pytest.param(lambda secret: (("authorization", "Token abc"),), id="malformed"),
    ],
)
async def test_calls_without_a_valid_token_are_unauthenticated(
    stub: Any, jwt_secret: str, make_metadata: Callable[[str], Any]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.CreateWarehouse(_valid_request(), metadata=make_metadata(jwt_secret))
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_verified_identity_and_request_id_reach_the_handler(
    stub: Any, jwt_secret: str
) -> None:
    metadata = (*_bearer(mint_token(jwt_secret, "alice")), ("x-request-id", "req-abc.123"))
    call = stub.CreateWarehouse(_valid_request(), metadata=metadata)
    response = await call
    assert response.warehouse.owner_user_id == "alice"
    assert response.warehouse.warehouse_id == "req-abc.123"
    assert ("x-request-id", "req-abc.123") in tuple(await call.initial_metadata())


async def test_a_request_id_is_made_up_when_the_caller_sends_none(
    stub: Any, jwt_secret: str
) -> None:
    response = await stub.CreateWarehouse(
        _valid_request(), metadata=_bearer(mint_token(jwt_secret, "bob"))
    )
    assert len(response.warehouse.warehouse_id) == 32


async def test_bad_input_is_invalid_argument_with_a_violation_per_field(
    stub: Any, jwt_secret: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.CreateWarehouse(
            warehouse_service_pb2.CreateWarehouseRequest(),
            metadata=_bearer(mint_token(jwt_secret, "alice")),
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "warehouse.storage.bucket" in (error.value.details() or "")
    bad_request = error_details_pb2.BadRequest()
    assert status_details(error.value)[0].Unpack(bad_request)
    assert {v.field for v in bad_request.field_violations} == {
        "warehouse.storage.bucket",
        "warehouse.display_name",
    }


async def test_service_errors_keep_their_code(stub: Any, jwt_secret: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.GetWarehouse(
            warehouse_service_pb2.GetWarehouseRequest(warehouse_id="missing"),
            metadata=_bearer(mint_token(jwt_secret, "alice")),
        )
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


async def test_unexpected_errors_are_internal_without_internals(
    stub: Any, jwt_secret: str, captured_logs: io.StringIO
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.GetWarehouse(
            warehouse_service_pb2.GetWarehouseRequest(warehouse_id="boom"),
            metadata=(*_bearer(mint_token(jwt_secret, "alice")), ("x-request-id", "trace-me")),
        )
    assert error.value.code() == grpc.StatusCode.INTERNAL
    assert error.value.details() == "internal error; request id trace-me"
    # The cause is in the service's own log, under the same request id.
    failures = [
        line for line in captured_logs.getvalue().splitlines() if "rpc failed unexpectedly" in line
    ]
    assert failures
    assert json.loads(failures[0])["request_id"] == "trace-me"


async def test_logged_requests_never_show_sensitive_values(
    stub: Any, jwt_secret: str, captured_logs: io.StringIO
) -> None:
    token = mint_token(jwt_secret, "alice")
    await stub.CreateWarehouse(_valid_request(), metadata=_bearer(token))
    lines = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    started = [line for line in lines if line["message"] == "rpc started"]
    assert started, "the request should have been logged at DEBUG"
    assert started[0]["request"]["warehouse"]["storage"]["bucket"] == "b-1"
    assert started[0]["request"]["credentials"]["secret_access_key"] == "[REDACTED]"
    assert started[0]["user_id"] == "alice"
    assert CANARY not in captured_logs.getvalue()
    assert token not in captured_logs.getvalue()


async def test_health_and_reflection_need_no_token(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        check: grpc.aio.UnaryUnaryMultiCallable[Any, bytes] = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=lambda data: data,
        )
        raw = await check(health_pb2.HealthCheckRequest(service=SERVICE))
        assert (
            health_pb2.HealthCheckResponse.FromString(raw).status
            == health_pb2.HealthCheckResponse.SERVING
        )


async def test_metrics_count_calls_by_code(stub: Any, jwt_secret: str) -> None:
    labels = ("unary_unary", SERVICE, "GetWarehouse", "NOT_FOUND")
    before = HANDLED.labels(*labels)._value.get()
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.GetWarehouse(
            warehouse_service_pb2.GetWarehouseRequest(warehouse_id="missing"),
            metadata=_bearer(mint_token(jwt_secret, "alice")),
        )
    assert HANDLED.labels(*labels)._value.get() == before + 1


async def test_calls_between_services_carry_identity_request_id_and_deadline(
    jwt_secret: str,
) -> None:
    """An upstream handler calls a downstream service; the downstream sees the same caller."""
    seen: dict[str, Any] = {}

    async def downstream_get(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
        seen["user"] = context.current_identity().user_id
        seen["request_id"] = context.request_id_var.get()
        seen["time_remaining"] = call.time_remaining()
        return warehouse_service_pb2.GetWarehouseResponse(
            warehouse=warehouse_pb2.Warehouse(warehouse_id="down")
        )

    downstream = await _start(jwt_secret, {"GetWarehouse": downstream_get})

    async def upstream_get(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async with service_channel(f"127.0.0.1:{downstream.port}") as channel:
            stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
            return await stub.GetWarehouse(request)

    upstream = await _start(jwt_secret, {"GetWarehouse": upstream_get})
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{upstream.port}") as channel:
            stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
            response = await stub.GetWarehouse(
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id="x"),
                metadata=(*_bearer(mint_token(jwt_secret, "carol")), ("x-request-id", "chain-1")),
                timeout=30,
            )
    finally:
        await upstream.stop()
        await downstream.stop()
    assert response.warehouse.warehouse_id == "down"
    assert seen["user"] == "carol"
    assert seen["request_id"] == "chain-1"
    assert seen["time_remaining"] is not None
    # The caller's 30 s, less what has passed, rounded up on each hop: gRPC sends a timeout
    # with a few significant digits (30.098 s has been seen downstream).
    assert 0 < seen["time_remaining"] <= 30.5


async def test_stop_lets_calls_in_flight_finish_and_refuses_new_ones(jwt_secret: str) -> None:
    server = await _start(jwt_secret, {"GetWarehouse": _get})
    metadata = _bearer(mint_token(jwt_secret, "alice"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
        in_flight = asyncio.ensure_future(
            stub.GetWarehouse(
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id="slow"), metadata=metadata
            )
        )
        await asyncio.sleep(0.3)
        stopping = asyncio.ensure_future(server.stop())
        await asyncio.sleep(0.1)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetWarehouse(
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id="fast"),
                metadata=metadata,
                timeout=2,
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        response = await in_flight
        await stopping
    assert response.warehouse.warehouse_id == "slow"
