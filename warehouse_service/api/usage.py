"""GetWarehouseUsage and GetExecutionUsage: what the meter recorded, shown to the owner and
members of the warehouse concerned (anyone else: NOT_FOUND, as for every other read).

Both answer from one stored row (usage_repository), whatever the warehouse's history.
"""

from __future__ import annotations

from service_runtime.callers import require_user
from service_runtime.errors import FieldViolations, Resource, not_found
from service_runtime.identifiers import check_identifier
from texera.lake.v1 import usage_pb2
from warehouse_service import records
from warehouse_service.api.validation import check_uuid
from warehouse_service.domain.permissions import Role
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store import memberships, usage_repository
from warehouse_service.store.db import Database, Record

_UNREADABLE = ("DELETING", "DELETED")


def _figures(row: Record | None) -> usage_pb2.StorageUsage:
    if row is None:
        return usage_pb2.StorageUsage()
    return usage_pb2.StorageUsage(
        bytes=row["bytes"],
        data_files=row["data_files"],
        rows=row["rows"],
        snapshots=row["snapshots"],
        tables=row["tables"],
    )


async def warehouse_usage(db: Database, warehouse_id: str) -> usage_pb2.WarehouseUsage:
    """The sums of a warehouse the calling user holds READER or more on."""
    violations = FieldViolations()
    check_uuid(violations, warehouse_id, "warehouse_id")
    violations.raise_if_any()
    async with db.connection() as connection:
        warehouse, _ = await memberships.warehouse_as(
            connection, warehouse_id, require_user().user_id, Role.READER
        )
        row = await usage_repository.of_warehouse(connection, warehouse["warehouse_id"])
    return usage_pb2.WarehouseUsage(
        warehouse_id=str(warehouse["warehouse_id"]),
        usage=_figures(row),
        executions=row["executions"] if row else 0,
        executions_pending=row["executions_pending"] if row else 0,
        update_time=records.timestamp(row["updated_at"] if row else None),
    )


async def execution_usage(
    db: Database, rules: ModeRules, execution_id: str
) -> usage_pb2.ExecutionUsage:
    """The figures of an execution in a warehouse the calling user holds READER or more on;
    pending while the execution has not ended."""
    violations = FieldViolations()
    check_identifier(violations, execution_id, "execution_id")
    violations.raise_if_any()
    async with db.connection() as connection:
        execution = await usage_repository.execution_warehouse(connection, execution_id)
        if (
            execution is None
            or execution["warehouse_state"] in _UNREADABLE
            or await rules.role_on_execution(
                connection,
                execution["warehouse_id"],
                execution["owner_user_id"],
                require_user().user_id,
            )
            < Role.READER
        ):
            raise not_found(Resource.EXECUTION, execution_id)
        row = await usage_repository.of_execution(connection, execution_id)
    return usage_pb2.ExecutionUsage(
        execution_id=execution_id,
        warehouse_id=str(execution["warehouse_id"]),
        usage=_figures(row),
        measurement_pending=row is None or row["measure_due_at"] is not None,
        measure_time=records.timestamp(row["measured_at"] if row else None),
    )
