"""The gateway's public services, built from their descriptors.

Every method takes the request as the bytes the caller sent and answers with
the bytes a backend sent (or, where the gateway answers itself, a message).
Before anything is forwarded, the caller has been authenticated (the server
interceptor), the request checked to decode as the method's message (bytes that
do not are INVALID_ARGUMENT, see service_runtime.undecodable) and the call counted
against the caller's rate limit. WarehouseService,
ComputingUnitService and RetentionService go to the warehouse service (the registry),
ResultService to the result service, ExecutionService to computing units (see executions);
the gateway answers IcebergAccessService itself (see iceberg_rest).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from gateway.executions import ExecutionRoutes
from gateway.forwarding import Backend
from gateway.iceberg_rest.access import IcebergAccess
from gateway.policy import REPEATABLE, Repeat, may_repeat
from gateway.rate_limit import RateLimiter
from service_runtime import undecodable, wire
from service_runtime.context import current_identity
from service_runtime.errors import ServiceError
from service_runtime.server import ServiceBinding
from texera.lake.v1 import (
    computing_unit_service_pb2,
    execution_service_pb2,
    iceberg_access_service_pb2,
    result_service_pb2,
    retention_service_pb2,
    warehouse_service_pb2,
)

WAREHOUSES = warehouse_service_pb2.DESCRIPTOR.services_by_name["WarehouseService"]
EXECUTIONS = execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"]
RESULTS = result_service_pb2.DESCRIPTOR.services_by_name["ResultService"]
UNITS = computing_unit_service_pb2.DESCRIPTOR.services_by_name["ComputingUnitService"]
RETENTION = retention_service_pb2.DESCRIPTOR.services_by_name["RetentionService"]
ICEBERG_ACCESS = iceberg_access_service_pb2.DESCRIPTOR.services_by_name["IcebergAccessService"]
PUBLIC_SERVICES = (WAREHOUSES, UNITS, EXECUTIONS, RESULTS, RETENTION, ICEBERG_ACCESS)

Behavior = Callable[[bytes, Any], Any]


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def _request(method: MethodDescriptor, rule: Repeat, request: bytes) -> Message | None:
    """The parsed request where the repeat rule needs its fields; None where it does not."""
    if rule is not Repeat.WHEN_IDEMPOTENT:
        return None
    parsed: Message = GetMessageClass(method.input_type).FromString(request)
    return parsed


def forwarding(backend: Callable[[], Backend], method: MethodDescriptor) -> Behavior:
    """The behavior that forwards method to backend(), repeated where the policy allows."""
    rule = REPEATABLE[method.containing_service.full_name][method.name]
    path = _path(method)
    if method.server_streaming:

        async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
            repeat = may_repeat(rule, _request(method, rule, request))
            async for message in backend().stream(path, request, retry=repeat):
                yield message

        return stream

    async def unary(request: bytes, context: Any) -> bytes:
        return await backend().unary(
            path, request, retry=may_repeat(rule, _request(method, rule, request))
        )

    return unary


@dataclass(frozen=True)
class Admission:
    """The per-user rate limit, applied before a call is forwarded."""

    limiter: RateLimiter

    def check(self) -> None:
        user = current_identity().user_id
        wait = self.limiter.admit(user)
        if wait:
            raise ServiceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"user {user} is over the rate limit of {self.limiter.rate:g} calls a second "
                f"(bursts of {self.limiter.burst}); retry in {wait:.2f} s",
                reason="RATE_LIMITED",
                retry_delay_seconds=wait,
            )

    def around(self, behavior: Behavior, streaming: bool) -> Behavior:
        if streaming:

            async def admitted_stream(request: bytes, context: Any) -> AsyncIterator[Any]:
                self.check()
                async for message in behavior(request, context):
                    yield message

            return admitted_stream

        async def admitted(request: bytes, context: Any) -> Any:
            self.check()
            return await behavior(request, context)

        return admitted


def _add(
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
    service: ServiceDescriptor,
    _servicer: object,
    server: grpc.aio.Server,
) -> None:
    wire.add_handlers(handlers, service, server)


def binding(
    service: ServiceDescriptor,
    behavior_of: Callable[[MethodDescriptor], Behavior],
    admission: Admission,
) -> ServiceBinding:
    """service served by the gateway: bytes in, bytes (or messages) out."""
    handlers = {
        method.name: wire.handler_factory(False, method.server_streaming)(
            admission.around(behavior_of(method), method.server_streaming),
            request_deserializer=undecodable.checked(GetMessageClass(method.input_type)),
            response_serializer=wire.serialize,
        )
        for method in service.methods
    }
    return ServiceBinding(service.full_name, None, partial(_add, handlers, service))


def _served(servicer: Callable[[], object], method: MethodDescriptor) -> Behavior:
    """The behavior of a method the gateway answers itself: servicer()'s method of that name
    (ExecutionService's router, IcebergAccessService)."""
    if method.server_streaming:

        async def stream(request: bytes, context: Any) -> AsyncIterator[Any]:
            async for message in getattr(servicer(), method.name)(request, context):
                yield message

        return stream

    async def unary(request: bytes, context: Any) -> Any:
        return await getattr(servicer(), method.name)(request, context)

    return unary


def public_bindings(
    warehouses: Callable[[], Backend],
    results: Callable[[], Backend],
    executions: Callable[[], ExecutionRoutes],
    iceberg_access: Callable[[], IcebergAccess],
    admission: Admission,
) -> list[ServiceBinding]:
    """The public services; each part is looked up per call (they exist once the gateway has
    started)."""
    return [
        binding(WAREHOUSES, partial(forwarding, warehouses), admission),
        binding(UNITS, partial(forwarding, warehouses), admission),
        binding(EXECUTIONS, partial(_served, executions), admission),
        binding(RESULTS, partial(forwarding, results), admission),
        binding(RETENTION, partial(forwarding, warehouses), admission),
        binding(ICEBERG_ACCESS, partial(_served, iceberg_access), admission),
    ]
