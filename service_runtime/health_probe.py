"""Asking a service for its grpc.health.v1 status, from tools and tests."""

from __future__ import annotations

import sys

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


def main() -> None:
    """``python -m service_runtime.health_probe HOST:PORT``: exit 0 if the service is SERVING
    (for container health checks)."""
    status = probe(sys.argv[1], timeout=3.0) if len(sys.argv) == 2 else "usage: HOST:PORT"
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    main()
