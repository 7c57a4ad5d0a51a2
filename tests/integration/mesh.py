"""Calling the mesh's services over gRPC as users and computing units do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack, UnitHandle
from embedded_stack.warehouse_request import create_warehouse_request
from service_runtime import auth
from service_runtime.errors import ERROR_DOMAIN, status_details
from service_runtime.health_probe import probe
from service_runtime.tls.identity import unit_server_name
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2, warehouse_service_pb2_grpc

Metadata = tuple[tuple[str, str], ...]
#: Where the virtual environment's programs are (grpcurl, the console scripts).
BIN = Path(sys.executable).parent


def bearer(token: str) -> Metadata:
    return (auth.bearer(token),)


@dataclass
class RegistryClient:
    """The registry's services, called with one identity's token."""

    stack: Stack
    #: Subject of the token: a user id, or a computing unit's id.
    subject: str
    warehouses: warehouse_service_pb2_grpc.WarehouseServiceStub
    ledger: registry_service_pb2_grpc.ExecutionLedgerServiceStub
    leases: registry_service_pb2_grpc.UnitLeaseServiceStub
    credentials: registry_service_pb2_grpc.ExecutionCredentialServiceStub
    metadata: Metadata

    def call(self, method: Callable[..., Any], request: Any) -> Any:
        return method(request, metadata=self.metadata, timeout=120)

    def through(self, unit_id: str, part: str = "warehouse-service") -> RegistryClient:
        """This user acting through computing unit unit_id: the unit's credential, and the
        user's token minted for that unit, as a unit sends them (to part, a registry)."""
        return registry_as(
            self.stack,
            self.subject,
            self.stack.unit_credential(unit_id),
            on_behalf=self.stack.unit_token(self.subject, unit_id),
            part=part,
            as_unit=True,
        )

    def for_user(self, other: RegistryClient) -> RegistryClient:
        """This computing unit calling for the user other, as a unit does: its credential, and
        other's token minted for this unit."""
        return registry_as(
            self.stack,
            other.subject,
            self.stack.unit_credential(self.subject),
            on_behalf=self.stack.unit_token(other.subject, self.subject),
            as_unit=True,
        )


def registry_as(
    stack: Stack,
    subject: str,
    token: str,
    *,
    on_behalf: str | None = None,
    part: str = "warehouse-service",
    as_unit: bool = False,
) -> RegistryClient:
    """Calls registry part with token: as the gateway (with its certificate in TLS mode), or
    as_unit, as a computing unit or an execution's Spark task calls (at the unit port in TLS
    mode, see Stack.registry_unit_channel)."""
    channel = stack.registry_unit_channel(part) if as_unit else stack.channel(part)
    extra = ((auth.ON_BEHALF_KEY, on_behalf),) if on_behalf else ()
    return RegistryClient(
        stack=stack,
        subject=subject,
        warehouses=warehouse_service_pb2_grpc.WarehouseServiceStub(channel),
        ledger=registry_service_pb2_grpc.ExecutionLedgerServiceStub(channel),
        leases=registry_service_pb2_grpc.UnitLeaseServiceStub(channel),
        credentials=registry_service_pb2_grpc.ExecutionCredentialServiceStub(channel),
        metadata=(*bearer(token), *extra),
    )


def user(stack: Stack, user_id: str) -> RegistryClient:
    """Calls as user_id, with the internal token the gateway would forward."""
    return registry_as(stack, user_id, stack.internal_token(user_id))


def computing_unit(stack: Stack, unit_id: str) -> RegistryClient:
    """Calls as computing unit unit_id, with the credential the registry issues it."""
    return registry_as(stack, unit_id, stack.unit_credential(unit_id), as_unit=True)


def gateway_account(stack: Stack) -> RegistryClient:
    """Calls as the gateway on its own account."""
    return registry_as(stack, "gateway", stack.service_token("gateway"))


def credentials(
    grant: BucketGrant, secret: str | None = None, key_id: str | None = None
) -> warehouse_pb2.S3Credentials:
    """The grant's access key, or another key of its owner (key_id), or a wrong secret."""
    return warehouse_pb2.S3Credentials(
        access_key_id=key_id or grant.access_key.access_key_id,
        secret_access_key=secret or grant.access_key.secret_access_key,
    )


def create_request(
    grant: BucketGrant,
    *,
    name: str = "results",
    key_prefix: str = "lake",
    request_id: str = "",
    secret: str | None = None,
    key_id: str | None = None,
) -> warehouse_service_pb2.CreateWarehouseRequest:
    request = create_warehouse_request(
        grant, name=name, key_prefix=key_prefix, request_id=request_id
    )
    request.credentials.CopyFrom(credentials(grant, secret, key_id))
    return request


def create_warehouse(
    client: RegistryClient, grant: BucketGrant, **kwargs: Any
) -> warehouse_pb2.Warehouse:
    response = client.call(client.warehouses.CreateWarehouse, create_request(grant, **kwargs))
    return response.warehouse  # type: ignore[no-any-return]


def record_unit(stack: Stack, unit_id: str, owner: str, shared_with: tuple[str, ...] = ()) -> None:
    """The registry's record of a unit of owner, without a process: what registry-level tests
    bind executions to (the process launcher's units are tested end to end elsewhere). It is
    PROVISIONING, just launched (recorded again: launched again), until it registers: a RUNNING
    unit that no launcher knows and that has not registered yet is one the registry's
    supervisor rightly fails, its credentials with it."""

    async def insert() -> None:
        connection = await asyncpg.connect(stack.database_url)
        try:
            await connection.execute(
                "INSERT INTO units (unit_id, owner_user_id, display_name, cores, memory_mib, "
                "state, launched_at, request_fingerprint, credential_generation) "
                "VALUES ($1, $2, 'recorded', 1, 512, 'PROVISIONING', now(), '', 'recorded') "
                "ON CONFLICT (unit_id) DO UPDATE SET state = 'PROVISIONING', launched_at = now(), "
                "credential_generation = 'recorded'",
                unit_id,
                owner,
            )
            await connection.executemany(
                "INSERT INTO unit_shares (unit_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                [(unit_id, user_id) for user_id in shared_with],
            )
        finally:
            await connection.close()

    asyncio.run(insert())


def register_unit(
    stack: Stack,
    unit_id: str | None = None,
    capacity: int = 4,
    *,
    owner: str = "unit-owner",
    shared_with: tuple[str, ...] = (),
    workers_confined: bool = True,
) -> str:
    """A recorded unit of owner (see record_unit), registered as the unit itself would (by
    default as a unit whose workers are confined, which may run the users it is shared
    with)."""
    unit_id = unit_id or f"cu-{uuid.uuid4().hex[:8]}"
    record_unit(stack, unit_id, owner, shared_with)
    unit = computing_unit(stack, unit_id)
    unit.call(
        unit.leases.RegisterComputingUnit,
        registry_service_pb2.RegisterComputingUnitRequest(
            computing_unit_id=unit_id,
            endpoint="127.0.0.1:1",
            capacity=capacity,
            workers_confined=workers_confined,
        ),
    )
    return unit_id


#: Codes a call may end with before any service of the mesh answers it.
TRANSPORT_CODES = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    """The error a call fails with (the test fails if it succeeds, or if the mesh's error
    carries no ErrorInfo reason a client could branch on)."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error = raised.value
    if error.code() not in TRANSPORT_CODES:
        assert reason(error), f"{error.code().name} without ErrorInfo: {error.details()}"
    return error


def reason(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of the mesh's error ("" when it carries none)."""
    return reason_of(error)[0]


def bad_fields(error: grpc.RpcError) -> set[str]:
    """The fields named by an error's BadRequest details."""
    fields = set()
    for detail in status_details(error):
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            fields |= {violation.field for violation in bad_request.field_violations}
    return fields


def reason_of(error: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The reason and metadata of the mesh's ErrorInfo ("" and {} without one)."""
    for detail in status_details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return str(info.reason), dict(info.metadata)
    return "", {}


def grpcurl_transport(
    stack: Stack, presenting: str | None = None, *, server_name: str = ""
) -> list[str]:
    """grpcurl's flags to reach a part of the stack: in TLS mode its CA, the certificate of
    service presenting (for the parts that require one) and the server name to verify (a
    computing unit's); -plaintext else."""
    if stack.tls is None:
        return ["-plaintext"]
    flags = ["-cacert", str(stack.tls.ca_file)]
    if presenting is not None:
        files = stack.tls.certificates[presenting]
        flags += ["-cert", str(files.certificate), "-key", str(files.key)]
    return [*flags, "-servername", server_name] if server_name else flags


def grpcurl(
    *args: str, check: bool = True, stdin: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """The real grpcurl binary (args begin with its transport, see grpcurl_transport); stdin
    feeds `-d @`."""
    return subprocess.run(
        [str(BIN / "grpcurl"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def unit_health(stack: Stack, unit: UnitHandle, timeout: float = 1.0) -> str:
    """A computing unit's health as the gateway would ask for it (see probe)."""
    return probe(
        unit.target,
        timeout=timeout,
        tls=stack.client_tls(),
        server_name=unit_server_name(unit.unit_id),
    )


def eventually(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    """Waits, checking every half second, until check() holds; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)
