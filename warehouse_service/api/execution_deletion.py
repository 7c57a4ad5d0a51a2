"""ExecutionService.DeleteExecution, served by the registry (the gateway routes it here; the
other methods of ExecutionService are the computing units').

Deleting tombstones the ledger's row and marks its cleanup PENDING in one transaction; the
cleanup queue (see cleaner) then drops the execution's tables with their files, resuming after
any crash. Only the submitter or the warehouse's owner may delete; a member of the warehouse
who is neither gets PERMISSION_DENIED, anyone else NOT_FOUND. A queued or running execution is
refused: its unit still writes. Deleting a deleted execution returns its tombstone.
"""

from __future__ import annotations

import logging
from typing import Any

from service_runtime.callers import require_user
from service_runtime.errors import FieldViolations, Resource, failed_precondition, not_found
from service_runtime.identifiers import check_identifier
from texera.lake.v1 import execution_service_pb2, execution_service_pb2_grpc
from warehouse_service import records
from warehouse_service.domain.permissions import Role, require
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store import retention_store
from warehouse_service.store.db import Connection, Database, Record, present

log = logging.getLogger("warehouse_service.api.execution_deletion")


class ExecutionDeletionServicer(execution_service_pb2_grpc.ExecutionServiceServicer):
    def __init__(self, db: Database, rules: ModeRules) -> None:
        self._db = db
        self._rules = rules

    async def DeleteExecution(
        self, request: execution_service_pb2.DeleteExecutionRequest, context: Any
    ) -> execution_service_pb2.DeleteExecutionResponse:
        user = require_user().user_id
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        violations.raise_if_any()
        async with self._db.transaction() as connection:
            row = await retention_store.execution_for_update(connection, request.execution_id)
            if row is None:
                raise not_found(Resource.EXECUTION, request.execution_id)
            role = await self._rules.role_on_execution(
                connection, row["warehouse_id"], row["owner_user_id"], user
            )
            if role is Role.NONE:
                raise not_found(Resource.EXECUTION, request.execution_id)
            if row["owner_user_id"] != user:
                require(role, Role.OWNER, str(row["warehouse_id"]))
            if row["deleted_at"] is None:
                await self._delete(connection, row)
            row = present(
                await retention_store.execution_for_update(connection, request.execution_id)
            )
        return execution_service_pb2.DeleteExecutionResponse(execution=records.execution(row, []))

    @staticmethod
    async def _delete(connection: Connection, row: Record) -> None:
        execution_id = row["execution_id"]
        if row["state"] not in retention_store.ENDED:
            error = failed_precondition(
                f"execution {execution_id} is {row['state'].lower()}; cancel it and delete it "
                "once it has ended",
                reason="EXECUTION_NOT_ENDED",
            )
            error.metadata["execution_state"] = row["state"]
            raise error
        warehouse_state = await retention_store.warehouse_state(connection, row["warehouse_id"])
        if warehouse_state in ("DELETING", "DELETED"):  # its executions are gone with it
            raise not_found(Resource.EXECUTION, execution_id)
        if warehouse_state != "ACTIVE":
            raise failed_precondition(
                f"warehouse {row['warehouse_id']} is {warehouse_state.lower()}; its executions "
                "cannot be deleted one by one now",
                reason=f"WAREHOUSE_{warehouse_state}",
            )
        await retention_store.mark_deleted(connection, [execution_id])
        log.info("execution deleted", extra={"execution_id": execution_id})
