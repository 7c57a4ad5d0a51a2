"""ExecutionService at the gateway: each call goes to the computing unit it concerns.

A submission goes to the unit the registry hands out for the caller: the one
it names if the caller owns it or it was shared with the caller (others are
NOT_FOUND), else the caller's default unit; a stopped unit is started first,
within the submission's deadline. If the unit cannot be reached and the
submission is idempotent, it is asked for once more. Get, Watch and Cancel go
to the unit running the execution, found through the registry with the
caller's token (which is also the owner check: only the execution's owner). When that
unit is gone, the registry's record answers: it is final once the unit's lease
has lapsed and the registry has failed what the unit ran; a deleted execution's tombstone
is the registry's alone. Listing reads the registry's ledger directly, with the caller's
token, and deleting goes to the registry, which serves DeleteExecution itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from catalog_map.registry import RegistryReader
from gateway.forwarding import Backend
from gateway.policy import REPEATABLE, may_repeat
from gateway.units import UnitDirectory
from service_runtime.errors import ServiceError
from service_runtime.execution_states import TERMINAL
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from texera.lake.v1 import execution_pb2, execution_service_pb2

es = execution_service_pb2
rs = registry_service_pb2
_NAME = es.DESCRIPTOR.services_by_name["ExecutionService"].full_name
SERVICE = f"/{_NAME}/"
#: The gateway's repeat rule of each ExecutionService method.
RULES = REPEATABLE[_NAME]


def _unreachable(error: ServiceError) -> bool:
    """The unit did not answer at all (no details: gRPC itself gave up on the connection)."""
    return error.code == grpc.StatusCode.UNAVAILABLE and not error.details


def _unit_gone(execution: execution_pb2.Execution) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        f"computing unit {execution.computing_unit_id}, which runs execution "
        f"{execution.execution_id}, is unreachable; once its lease lapses the registry ends "
        "the execution",
        reason="COMPUTING_UNIT_UNAVAILABLE",
        metadata={"computing_unit_id": execution.computing_unit_id},
        retry_delay_seconds=5.0,
    )


class ExecutionRoutes:
    def __init__(self, units: UnitDirectory, registry: RegistryReader, ledger: Backend) -> None:
        self._units = units
        self._registry = registry
        self._ledger = ledger
        self._acquire = registry_service_pb2_grpc.UnitLeaseServiceStub(
            registry.channel
        ).AcquireComputingUnit

    async def _unit_for(self, unit_id: str) -> rs.UnitRegistration:
        """The running unit the caller may submit to (the registry decides, with the caller's
        token; it waits for a stopped unit to start within the call's deadline)."""
        try:
            response = await self._acquire(
                rs.AcquireComputingUnitRequest(computing_unit_id=unit_id)
            )
        except grpc.aio.AioRpcError as exc:
            raise ServiceError.relayed(exc) from exc
        self._units.remember(response.registration)
        return response.registration

    async def SubmitExecution(self, request: bytes, context: Any) -> bytes:
        submission = es.SubmitExecutionRequest.FromString(request)
        unit = await self._unit_for(submission.computing_unit_id)
        try:
            return await self._submit_to(unit, request)
        except ServiceError as error:
            if not (_unreachable(error) and may_repeat(RULES["SubmitExecution"], submission)):
                raise
            self._units.refused(unit)
        # The unit did not answer; an idempotent submission asks the registry once more.
        return await self._submit_to(await self._unit_for(submission.computing_unit_id), request)

    async def _submit_to(self, unit: rs.UnitRegistration, request: bytes) -> bytes:
        return await self._units.backend(unit).unary(
            SERVICE + "SubmitExecution", request, retry=False
        )

    async def _where(self, execution_id: str) -> execution_pb2.Execution:
        """The registry's record of the execution (NOT_FOUND for another user's)."""
        return (await self._registry.resolve_execution(execution_id)).execution

    async def _on_unit(
        self, method: str, request: bytes, execution_id: str
    ) -> tuple[bytes | None, execution_pb2.Execution]:
        """The running unit's answer, or None when that unit is gone; and the registry's
        record of the execution."""
        execution = await self._where(execution_id)
        unit = self._units.find(execution.computing_unit_id)
        if unit is not None and not execution.HasField("delete_time"):
            try:
                answer = await self._units.backend(unit).unary(
                    SERVICE + method, request, retry=may_repeat(RULES[method], None)
                )
            except ServiceError as error:
                if not _unreachable(error):
                    raise
                self._units.refused(unit)
            else:
                return answer, execution
        return None, execution

    async def GetExecution(self, request: bytes, context: Any) -> bytes | es.GetExecutionResponse:
        execution_id = es.GetExecutionRequest.FromString(request).execution_id
        answer, recorded = await self._on_unit("GetExecution", request, execution_id)
        return answer if answer is not None else es.GetExecutionResponse(execution=recorded)

    async def CancelExecution(
        self, request: bytes, context: Any
    ) -> bytes | es.CancelExecutionResponse:
        execution_id = es.CancelExecutionRequest.FromString(request).execution_id
        answer, recorded = await self._on_unit("CancelExecution", request, execution_id)
        if answer is not None:
            return answer
        if recorded.state not in TERMINAL:
            raise _unit_gone(recorded)
        return es.CancelExecutionResponse(execution=recorded)

    async def WatchExecution(
        self, request: bytes, context: Any
    ) -> AsyncIterator[bytes | es.WatchExecutionResponse]:
        execution = await self._where(es.WatchExecutionRequest.FromString(request).execution_id)
        unit = self._units.find(execution.computing_unit_id)
        if unit is not None and not execution.HasField("delete_time"):
            async for message in self._units.backend(unit).stream(
                SERVICE + "WatchExecution",
                request,
                retry=may_repeat(RULES["WatchExecution"], None),
            ):
                yield message
            return
        if execution.state not in TERMINAL:
            raise _unit_gone(execution)
        yield es.WatchExecutionResponse(execution=execution, event_time=execution.end_time)

    async def ListExecutions(self, request: bytes, context: Any) -> es.ListExecutionsResponse:
        listed = await self._registry.list_executions(es.ListExecutionsRequest.FromString(request))
        return es.ListExecutionsResponse(
            executions=listed.executions, next_page_token=listed.next_page_token
        )

    async def DeleteExecution(self, request: bytes, context: Any) -> bytes:
        return await self._ledger.unary(
            SERVICE + "DeleteExecution", request, retry=may_repeat(RULES["DeleteExecution"], None)
        )
