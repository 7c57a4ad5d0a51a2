"""The registry reads made for a user (catalog_map.registry.RegistryReader) are repeated while
the registry is unavailable for a moment, and only then.

A real gRPC server in this process plays the registry, failing on cue.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from catalog_map.registry import RegistryReader
from service_runtime.errors import ServiceError
from service_runtime.repeat import REPEAT_POLICY
from texera.lake.internal.v1 import registry_service_pb2

rs = registry_service_pb2


class Registry:
    """Answers ResolveExecution with `failure` for the first `failures` calls."""

    def __init__(self, failures: int, failure: grpc.StatusCode) -> None:
        self.failures = failures
        self.failure = failure
        self.calls = 0

    async def ResolveExecution(
        self, request: rs.ResolveExecutionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> rs.ResolveExecutionResponse:
        self.calls += 1
        if self.calls <= self.failures:
            await context.abort(self.failure, "not now")
        answer = rs.ResolveExecutionResponse()
        answer.execution.execution_id = request.execution_id
        return answer


async def _reader_of(registry: Registry) -> tuple[grpc.aio.Server, RegistryReader]:
    server = grpc.aio.server()
    resolve = grpc.unary_unary_rpc_method_handler(
        registry.ResolveExecution,
        request_deserializer=rs.ResolveExecutionRequest.FromString,
        response_serializer=rs.ResolveExecutionResponse.SerializeToString,
    )
    name = rs.DESCRIPTOR.services_by_name["ExecutionLedgerService"].full_name
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(name, {"ResolveExecution": resolve}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, RegistryReader(f"127.0.0.1:{port}", timeout_seconds=5)


@pytest.mark.parametrize(
    ("failures", "failure", "answered", "calls"),
    [
        (2, grpc.StatusCode.UNAVAILABLE, True, 3),
        (9, grpc.StatusCode.UNAVAILABLE, False, REPEAT_POLICY.max_attempts),
        (1, grpc.StatusCode.NOT_FOUND, False, 1),
    ],
)
async def test_a_read_is_repeated_while_the_registry_is_unavailable_only(
    failures: int, failure: grpc.StatusCode, answered: bool, calls: int
) -> None:
    registry = Registry(failures, failure)
    server, reader = await _reader_of(registry)
    try:
        if answered:
            resolved = await reader.resolve_execution("e-1")
            assert resolved.execution.execution_id == "e-1"
        else:
            with pytest.raises(ServiceError) as error:
                await reader.resolve_execution("e-1")
            assert error.value.code == failure
        assert registry.calls == calls
    finally:
        await reader.close()
        await server.stop(None)
