"""The computing unit's calls to the warehouse registry.

Resolving warehouses and executions while serving a user's call carries that
user's token (see catalog_map.registry). Every other call presents the unit's
own credential, issued by the registry at launch; binding a submission and
listing executions also name the user served, in ``x-texera-on-behalf-of``.
"""

from __future__ import annotations

from catalog_map.registry import RegistryReader
from service_runtime.auth import bearer, on_behalf
from service_runtime.context import current_identity
from texera.lake.v1 import execution_pb2, execution_service_pb2, registry_service_pb2

rs = registry_service_pb2


class RegistryClient(RegistryReader):
    def __init__(
        self, target: str, unit_id: str, credential: str, timeout_seconds: float = 30.0
    ) -> None:
        super().__init__(target, timeout_seconds)
        self.unit_id = unit_id
        self._credential = credential

    def _as_unit(self) -> tuple[tuple[str, str], ...]:
        """The metadata of a call the unit makes as itself."""
        return (bearer(self._credential),)

    def _for_caller(self) -> tuple[tuple[str, str], ...]:
        """The metadata of a call the unit makes as itself for the user it serves now."""
        return (*self._as_unit(), on_behalf(current_identity().token))

    # For the calling user ---------------------------------------------------------

    async def bind(self, request: rs.BindExecutionRequest) -> rs.BindExecutionResponse:
        return await self._call(
            lambda: self._stub.BindExecution(
                request, metadata=self._for_caller(), timeout=self._timeout
            )
        )

    async def list_executions(
        self,
        listing: execution_service_pb2.ListExecutionsRequest,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> rs.ListExecutionRecordsResponse:
        return await super().list_executions(listing, metadata or self._for_caller())

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
            lambda: self._stub.UpdateExecutionState(
                request, metadata=self._as_unit(), timeout=self._timeout
            )
        )
        return response.execution

    async def register(self, endpoint: str, capacity: int) -> rs.RegisterComputingUnitResponse:
        request = rs.RegisterComputingUnitRequest(
            computing_unit_id=self.unit_id, endpoint=endpoint, capacity=capacity
        )
        return await self._call(
            lambda: self._stub.RegisterComputingUnit(
                request, metadata=self._as_unit(), timeout=self._timeout
            )
        )

    async def heartbeat(self, running: int, queued: int) -> rs.HeartbeatComputingUnitResponse:
        request = rs.HeartbeatComputingUnitRequest(
            computing_unit_id=self.unit_id, running_executions=running, queued_executions=queued
        )
        return await self._call(
            lambda: self._stub.HeartbeatComputingUnit(
                request, metadata=self._as_unit(), timeout=self._timeout
            )
        )
