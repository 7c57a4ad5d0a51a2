"""boto3 clients whose connections go only to addresses the endpoint guard accepted.

Checking an endpoint's name before a client is made is not enough: the client
resolves the name again when it connects, and the answer may differ then (DNS
rebinding). Here the connection itself resolves the host once, checks every
address, and connects to a checked one; TLS still verifies the host name.
Allowed endpoints (the operator's list) connect as usual.

This is the one module that reaches into botocore's and urllib3's internals:
the HTTP session of a client and the connection classes of its pools.
"""

from __future__ import annotations

import socket
from typing import Any, ClassVar, TypeVar

from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from service_runtime.endpoint_guard import EndpointGuard

Client = TypeVar("Client")


class _GuardedConnection:
    """Mixed into botocore's connection classes ahead of them."""

    guard: ClassVar[EndpointGuard]
    scheme: ClassVar[str]
    host: str
    port: int
    timeout: Any
    source_address: tuple[str, int] | None
    socket_options: Any

    def _new_conn(self) -> socket.socket:
        if self.guard.is_allowed(self.scheme, self.host, self.port):
            connection: socket.socket = super()._new_conn()  # type: ignore[misc]
            return connection
        failure: OSError | None = None
        for address in self.guard.checked_addresses(self.host, self.port):
            try:
                return create_connection(
                    (str(address), self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except OSError as exc:
                failure = exc
        if isinstance(failure, TimeoutError):
            raise ConnectTimeoutError(self, "connection timed out") from failure
        raise NewConnectionError(self, "connection failed") from failure  # type: ignore[arg-type]


def _pool(
    pool: type[HTTPConnectionPool], connection: type[Any], guard: EndpointGuard, scheme: str
) -> type[HTTPConnectionPool]:
    guarded = type(
        f"Guarded{connection.__name__}",
        (_GuardedConnection, connection),
        {"guard": guard, "scheme": scheme},
    )
    return type(f"Guarded{pool.__name__}", (pool,), {"ConnectionCls": guarded})


def guarded(client: Client, guard: EndpointGuard) -> Client:
    """client (a fresh boto3 client), its connections made through guard."""
    pools = {
        "http": _pool(AWSHTTPConnectionPool, AWSHTTPConnection, guard, "http"),
        "https": _pool(AWSHTTPSConnectionPool, AWSHTTPSConnection, guard, "https"),
    }
    session = client._endpoint.http_session  # type: ignore[attr-defined]
    session._pool_classes_by_scheme = pools  # used by proxy managers made later
    session._manager.pool_classes_by_scheme = pools
    return client
