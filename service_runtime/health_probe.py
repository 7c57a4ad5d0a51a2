"""Asking a service for its grpc.health.v1 status, from tools and tests."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

_CHECK = "/grpc.health.v1.Health/Check"


def probe(target: str, *, service: str = "", timeout: float = 1.0) -> str:
    """The health of a service at target: ``SERVING``, ``NOT_SERVING``, ... or
    ``UNREACHABLE (<status code>)`` when the call fails."""
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary(
            _CHECK,
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        try:
            response = check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"UNREACHABLE ({exc.code().name})"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
