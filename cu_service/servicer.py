"""ExecutionService on a computing unit.

Executions this unit runs are answered from its own memory; others (finished
ones from before a restart, or ones on another unit) from the registry's
ledger, which checks that the caller owns them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cu_service.execution_view import LocalExecution
from cu_service.manager import ExecutionManager
from cu_service.registry import RegistryClient
from service_runtime.callers import require_user
from service_runtime.errors import FieldViolations, ServiceError
from service_runtime.execution_states import TERMINAL
from service_runtime.identifiers import IDENTIFIER
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

es = execution_service_pb2


def _id_violations(execution_id: str) -> FieldViolations:
    violations = FieldViolations()
    violations.check(
        bool(IDENTIFIER.match(execution_id)),
        "execution_id",
        "must be 1 to 64 letters, digits, '_' or '-'",
    )
    return violations


def _check_id(execution_id: str) -> None:
    _id_violations(execution_id).raise_if_any()


@dataclass
class UnitParts:
    """What the servicer needs, there once the unit has started (Spark takes seconds)."""

    manager: ExecutionManager | None = None
    registry: RegistryClient | None = None


class ExecutionServicer(execution_service_pb2_grpc.ExecutionServiceServicer):
    def __init__(self, parts: UnitParts) -> None:
        self._parts = parts

    @property
    def _manager(self) -> ExecutionManager:
        if self._parts.manager is None:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "the computing unit is still starting")
        return self._parts.manager

    @property
    def _registry(self) -> RegistryClient:
        if self._parts.registry is None:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "the computing unit is still starting")
        return self._parts.registry

    async def _readable(self, execution_id: str, caller: str) -> LocalExecution | None:
        """The unit's own record of an execution caller may read: its submitter's, or a member's
        of its warehouse (the registry checks the role, as for anyone else)."""
        local = self._manager.get(execution_id)
        if local is not None and local.owner != caller:
            await self._recorded(execution_id)  # NOT_FOUND unless caller may read it
        return local

    async def _recorded(self, execution_id: str) -> execution_pb2.Execution:
        return (await self._registry.resolve_execution(execution_id)).execution

    def _elsewhere(self, execution: execution_pb2.Execution) -> ServiceError:
        return ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"execution {execution.execution_id} runs on computing unit {execution.computing_unit_id}",
            reason="EXECUTION_ON_ANOTHER_UNIT",
            metadata={"computing_unit_id": execution.computing_unit_id},
        )

    async def SubmitExecution(
        self, request: es.SubmitExecutionRequest, context: Any
    ) -> es.SubmitExecutionResponse:
        owner = require_user().user_id
        return es.SubmitExecutionResponse(execution=await self._manager.submit(request, owner))

    async def GetExecution(
        self, request: es.GetExecutionRequest, context: Any
    ) -> es.GetExecutionResponse:
        caller = require_user().user_id
        _check_id(request.execution_id)
        local = await self._readable(request.execution_id, caller)
        execution = (
            local.snapshot() if _unfinished(local) else await self._recorded(request.execution_id)
        )
        return es.GetExecutionResponse(execution=execution)

    async def ListExecutions(
        self, request: es.ListExecutionsRequest, context: Any
    ) -> es.ListExecutionsResponse:
        require_user()
        listed = await self._registry.list_executions(request)
        executions = []
        for recorded in listed.executions:  # what runs here is fresher here
            local = self._manager.get(recorded.execution_id)
            executions.append(local.snapshot() if _unfinished(local) else recorded)
        return es.ListExecutionsResponse(
            executions=executions, next_page_token=listed.next_page_token
        )

    async def WatchExecution(
        self, request: es.WatchExecutionRequest, context: Any
    ) -> AsyncIterator[es.WatchExecutionResponse]:
        caller = require_user().user_id
        _check_id(request.execution_id)
        local = await self._readable(request.execution_id, caller)
        if not _unfinished(local):
            recorded = await self._recorded(request.execution_id)
            if recorded.state not in TERMINAL:
                raise self._elsewhere(recorded)
            yield es.WatchExecutionResponse(execution=recorded, event_time=recorded.end_time)
            return
        async for execution in local.watch():
            now = Timestamp()
            now.GetCurrentTime()
            yield es.WatchExecutionResponse(execution=execution, event_time=now)

    async def DeleteExecution(
        self, request: es.DeleteExecutionRequest, context: Any
    ) -> es.DeleteExecutionResponse:
        # The ledger owns deletion; the gateway sends it to the registry, never to a unit.
        raise ServiceError(
            grpc.StatusCode.UNIMPLEMENTED,
            "DeleteExecution is served by the registry; call it through the gateway",
        )

    async def CancelExecution(
        self, request: es.CancelExecutionRequest, context: Any
    ) -> es.CancelExecutionResponse:
        caller = require_user().user_id
        violations = _id_violations(request.execution_id)
        violations.check(len(request.reason) <= 1000, "reason", "must be at most 1000 characters")
        violations.raise_if_any()
        local = await self._readable(request.execution_id, caller)
        if not _unfinished(local):
            recorded = await self._recorded(request.execution_id)
            _require_submitter(recorded, caller)
            if recorded.state not in TERMINAL:
                raise self._elsewhere(recorded)
            return es.CancelExecutionResponse(execution=recorded)
        _require_submitter(local.execution, caller)
        execution = await self._manager.cancel(local, request.reason)
        return es.CancelExecutionResponse(execution=execution)


def _require_submitter(execution: execution_pb2.Execution, caller: str) -> None:
    """Members of an execution's warehouse may read it; changing it is its submitter's."""
    if execution.owner_user_id != caller:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"only the user who submitted execution {execution.execution_id} may cancel it",
            reason="EXECUTION_SUBMITTER_ONLY",
        )


def _unfinished(local: LocalExecution | None) -> TypeGuard[LocalExecution]:
    """Whether the unit's own view is the freshest: once an execution ended, the registry's
    record also says how far the cleanup of a failed one is."""
    return local is not None and local.execution.state not in TERMINAL
