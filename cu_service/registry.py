"""The computing unit's calls to the warehouse registry.

Every call carries the unit's own credential, which the registry issued to it: the one the
unit was launched with, then each fresh one the registry hands it with a registration or a
heartbeat (credentials live minutes).
Calls made while serving a user's call (resolve, bind) also carry that user's
token, minted for this unit alone, so the registry checks the user's rights as
well as the unit's (see service_runtime.propagation).
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.duration_pb2 import Duration

from catalog_map.registry import RegistryReader
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.internal.v1 import (
    execution_credentials_pb2,
    registry_service_pb2,
    registry_service_pb2_grpc,
)
from texera.lake.v1 import execution_pb2

rs = registry_service_pb2


class UnitCredential:
    """The unit's current credential, shared by its registry clients (the heartbeats' thread
    renews what the executions' calls use)."""

    def __init__(self, launched_with: str) -> None:
        self._current = launched_with

    def __call__(self) -> str:
        return self._current

    def renew(self, credential: str) -> None:
        """Takes a fresh credential from the registry (none: keeps the current one)."""
        if credential:
            self._current = credential


class RegistryClient(RegistryReader):
    def __init__(
        self,
        target: str,
        unit_id: str,
        credential: UnitCredential,
        timeout_seconds: float = 30.0,
        *,
        tls: MeshClientTls | None = None,
    ) -> None:
        super().__init__(target, timeout_seconds, credential=credential, tls=tls)
        self.unit_id = unit_id
        self._leases = registry_service_pb2_grpc.UnitLeaseServiceStub(self.channel)
        self._credentials = registry_service_pb2_grpc.ExecutionCredentialServiceStub(self.channel)
        self._credential = credential

    # For the calling user ---------------------------------------------------------

    async def bind(self, request: rs.BindExecutionRequest) -> rs.BindExecutionResponse:
        return await self._call(lambda: self._stub.BindExecution(request, timeout=self._timeout))

    async def open_execution_catalog(
        self,
        execution_id: str,
        warehouse_id: str,
        sources: list[rs.SourceTable],
    ) -> rs.CatalogBinding:
        """How the execution reaches its catalog (the gatekeeper, with its token): for the
        calling user with its source tables, or for the unit alone (a renewal) without."""
        request = rs.OpenExecutionCatalogRequest(
            execution_id=execution_id,
            warehouse_id=warehouse_id,
            computing_unit_id=self.unit_id,
            source_tables=sources,
        )
        response = await self._read(
            lambda: self._credentials.OpenExecutionCatalog(request, timeout=self._timeout),
            "opening an execution's catalog",
        )
        return response.binding

    # For the unit itself ----------------------------------------------------------

    async def report(
        self,
        execution_id: str,
        state: execution_pb2.ExecutionState.ValueType,
        *,
        error: execution_pb2.ExecutionError | None = None,
        outputs: list[execution_pb2.ExecutionOutput] | None = None,
        progress: execution_pb2.ExecutionProgress | None = None,
    ) -> execution_pb2.Execution:
        request = rs.UpdateExecutionStateRequest(
            execution_id=execution_id,
            computing_unit_id=self.unit_id,
            state=state,
            error=error,
            outputs=outputs or [],
            progress=progress,
        )
        response = await self._call(
            lambda: self._stub.UpdateExecutionState(request, timeout=self._timeout)
        )
        return response.execution

    async def register(
        self, endpoint: str, capacity: int, *, workers_confined: bool
    ) -> rs.RegisterComputingUnitResponse:
        request = rs.RegisterComputingUnitRequest(
            computing_unit_id=self.unit_id,
            endpoint=endpoint,
            capacity=capacity,
            workers_confined=workers_confined,
        )
        response = await self._call(
            lambda: self._leases.RegisterComputingUnit(request, timeout=self._timeout)
        )
        self._credential.renew(response.credential)
        return response

    async def heartbeat(
        self,
        running: int,
        queued: int,
        *,
        unfinished: Sequence[str] = (),
        certificate_signing_request: bytes = b"",
    ) -> rs.HeartbeatComputingUnitResponse:
        """Renews the lease; the answer names those of the unfinished executions that the
        registry ended itself."""
        request = rs.HeartbeatComputingUnitRequest(
            computing_unit_id=self.unit_id,
            running_executions=running,
            queued_executions=queued,
            unfinished_execution_ids=unfinished,
            certificate_signing_request=certificate_signing_request,
        )
        response = await self._call(
            lambda: self._leases.HeartbeatComputingUnit(request, timeout=self._timeout)
        )
        self._credential.renew(response.credential)
        return response

    async def issue_execution_token(
        self, execution_id: str, lifetime_seconds: float
    ) -> execution_credentials_pb2.IssueExecutionTokenResponse:
        """The token the execution's tasks renew storage credentials with."""
        lifetime = Duration()
        lifetime.FromNanoseconds(int(lifetime_seconds * 1e9))
        request = execution_credentials_pb2.IssueExecutionTokenRequest(
            execution_id=execution_id, computing_unit_id=self.unit_id, lifetime=lifetime
        )
        return await self._call(
            lambda: self._credentials.IssueExecutionToken(request, timeout=self._timeout)
        )
