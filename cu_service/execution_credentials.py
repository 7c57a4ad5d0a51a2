"""How an execution's Spark tasks renew their storage credentials without a catalog token.

Tasks run in the same Python workers as users' functions, so whatever they hold, users' code
can find. They hold no catalog token: the driver asks the registry for the execution's own
token (good only for ExecutionCredentialService.VendTableCredentials, for this execution's tables, while
it runs; see warehouse_service.internal.execution_tokens) and each task carries that, with the
registry's address and the table it writes, and calls the registry over gRPC when its
credentials near their end.

Over TLS, tasks carry the CA bundle that verifies the registry and nothing more: deliberately
not the unit's client certificate and key, which users' code could read and then call the mesh
as the unit. Tasks therefore call without a client certificate: the caller rules (see
service_runtime.tls.caller_rules) take an execution's token from any peer, since that token
alone binds the call to one execution's tables while it runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from catalog_map.credentials import CredentialTerm
from service_runtime.auth import bearer
from service_runtime.tls.mesh_client import MeshClientTls, blocking_mesh_channel
from texera.lake.internal.v1 import execution_credentials_pb2, registry_service_pb2_grpc


@dataclass(frozen=True)
class IssuedToken:
    token: str = field(repr=False)
    issued_at: float
    expires_at: float


@dataclass(frozen=True)
class RegistryVending:
    """Fresh credentials of one of the execution's tables, from the registry; picklable."""

    registry_target: str
    execution_id: str
    namespace: str
    table_name: str
    token: str = field(repr=False)
    timeout_seconds: float = 30.0
    #: The CA bundle only (server_verification_only): never the unit's key.
    tls: MeshClientTls | None = None

    def fetch(self, location: str) -> dict[str, str]:
        request = execution_credentials_pb2.VendTableCredentialsRequest(
            execution_id=self.execution_id, namespace=self.namespace, table_name=self.table_name
        )
        with blocking_mesh_channel(self.registry_target, self.tls) as channel:
            stub = registry_service_pb2_grpc.ExecutionCredentialServiceStub(channel)
            try:
                response = stub.VendTableCredentials(
                    request, metadata=(bearer(self.token),), timeout=self.timeout_seconds
                )
            except grpc.RpcError as exc:
                raise OSError(
                    f"the registry vended no credentials for {self.namespace}.{self.table_name}"
                    f": {exc.code().name} {exc.details()}"
                ) from None
        if not location.startswith(response.prefix):
            raise PermissionError(f"the registry vended no credentials for {location}")
        return dict(response.config)


class ExecutionCredentials:
    """The driver's side: the execution's token, issued on first use and issued again once
    less than the renewal margin of it is left; issue() asks the registry (blocking)."""

    def __init__(
        self,
        registry_target: str,
        execution_id: str,
        issue: Callable[[], IssuedToken],
        *,
        tls: MeshClientTls | None = None,
    ) -> None:
        if tls is not None and tls.private_key is not None:
            raise ValueError("Spark tasks run beside users' code: they get no private key")
        self._tls = tls
        self._target = registry_target
        self._execution_id = execution_id
        self._issue = issue
        self._lock = threading.Lock()
        self._current: IssuedToken | None = None

    def _token(self) -> str:
        with self._lock:
            current = self._current
            if (
                current is None
                or CredentialTerm(current.issued_at, current.expires_at).renewal_due()
            ):
                current = self._current = self._issue()
            return current.token

    def for_table(self, namespace: str, table_name: str) -> RegistryVending:
        """What a task writing namespace.table_name renews its credentials with."""
        return RegistryVending(
            self._target, self._execution_id, namespace, table_name, self._token(), tls=self._tls
        )


def issued(response: execution_credentials_pb2.IssueExecutionTokenResponse) -> IssuedToken:
    return IssuedToken(
        response.execution_token, time.time(), float(response.expire_time.ToSeconds())
    )
