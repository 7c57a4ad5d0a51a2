"""Bytes that do not decode, sent to every method of every public service, through the
gateway and to the service behind it: INVALID_ARGUMENT with ErrorInfo, never grpc's UNKNOWN or
the gateway's INTERNAL (with a traceback in its log)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from embedded_stack.stack import Stack
from gateway.service import EXECUTIONS, ICEBERG_ACCESS, PUBLIC_SERVICES, RESULTS
from tests.integration.executions import SHARED_UNIT_OWNER
from tests.integration.mesh import Metadata, bearer
from tests.wire_garbage import CORRUPT_REQUESTS, assert_malformed
from texera.lake.internal.v1 import registry_service_pb2

pytestmark = pytest.mark.integration

INTERNAL = tuple(registry_service_pb2.DESCRIPTOR.services_by_name.values())
USER = "garbage-sender"


def _sender(
    channel: grpc.Channel, method: MethodDescriptor, metadata: Metadata
) -> Callable[[bytes], object]:
    """Sends bytes as the method's request, and reads the whole answer."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    if method.server_streaming:
        stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
        return lambda request: list(stream(request, metadata=metadata, timeout=60))
    unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
    return lambda request: unary(request, metadata=metadata, timeout=60)


def _every_method_refuses(
    channel: grpc.Channel, service: ServiceDescriptor, metadata: Metadata
) -> None:
    """Each corrupt request, as its bytes, to each of service's methods over channel."""
    with channel:
        for method in service.methods:
            send = _sender(channel, method, metadata)
            for corrupt in CORRUPT_REQUESTS:
                with pytest.raises(grpc.RpcError) as error:
                    send(corrupt)
                assert_malformed(error.value)


@pytest.mark.parametrize("service", PUBLIC_SERVICES, ids=lambda s: s.name)
def test_through_the_gateway(stack: Stack, service: ServiceDescriptor) -> None:
    channel = stack.channel("gateway", presenting=None)
    _every_method_refuses(channel, service, bearer(stack.token(USER)))


@pytest.mark.parametrize(
    "service",
    # The gateway answers ExecutionService (routing it) and IcebergAccessService itself.
    [s for s in (*PUBLIC_SERVICES, *INTERNAL) if s not in (EXECUTIONS, ICEBERG_ACCESS)],
    ids=lambda s: s.name,
)
def test_at_the_service_behind_the_gateway(stack: Stack, service: ServiceDescriptor) -> None:
    part = "result-service" if service is RESULTS else "warehouse-service"
    channel = stack.channel(part)  # as the gateway
    _every_method_refuses(channel, service, bearer(stack.internal_token(USER)))


def test_at_a_computing_unit(stack: Stack) -> None:
    unit = stack.unit_for(SHARED_UNIT_OWNER)
    metadata = stack.unit_call_metadata(SHARED_UNIT_OWNER, unit.unit_id)
    _every_method_refuses(stack.unit_channel(unit), EXECUTIONS, metadata)
