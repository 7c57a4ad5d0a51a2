"""Asking a service for its grpc.health.v1 status, from tools and tests."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2

from service_runtime.tls.mesh_client import MeshClientTls, blocking_mesh_channel

_CHECK = "/grpc.health.v1.Health/Check"
_USAGE = "usage: HOST:PORT [CA_BUNDLE [CERTIFICATE KEY]]"


def probe(
    target: str,
    *,
    service: str = "",
    timeout: float = 1.0,
    tls: MeshClientTls | None = None,
    server_name: str = "",
) -> str:
    """The health of a service at target (over TLS with tls, verifying server_name if given,
    see blocking_mesh_channel): ``SERVING``, ``NOT_SERVING``, ... or
    ``UNREACHABLE (<status code>)`` when the call fails."""
    with blocking_mesh_channel(target, tls, server_name=server_name) as channel:
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
    """``python -m service_runtime.health_probe HOST:PORT [CA_BUNDLE [CERTIFICATE KEY]]``:
    exit 0 if the service is SERVING (for container health checks); with a CA bundle over
    TLS, with a certificate and its key presenting it (a server that requires one)."""
    args = sys.argv[1:]
    if len(args) not in (1, 2, 4):
        print(_USAGE)
        sys.exit(1)
    tls = None
    if len(args) > 1:
        certificate, key = args[2:] if len(args) == 4 else ("", "")
        tls = MeshClientTls.from_files(args[1], certificate_chain=certificate, private_key=key)
    status = probe(args[0], timeout=3.0, tls=tls)
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    main()
