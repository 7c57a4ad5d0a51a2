"""Database rows to API messages."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import computing_unit_service_pb2, execution_pb2, warehouse_pb2
from warehouse_service.catalog.catalog_oauth import AccessToken
from warehouse_service.domain.permissions import Role
from warehouse_service.domain.states import (
    CLEANUP_STATES,
    EXECUTION_STATES,
    FLAVORS,
    WAREHOUSE_STATES,
)
from warehouse_service.store.db import Record

Row = Record


def timestamp(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def warehouse(row: Row, caller_role: Role) -> warehouse_pb2.Warehouse:
    """A warehouse as the API shows it to a caller with caller_role on it (never a secret:
    none is kept)."""
    return warehouse_pb2.Warehouse(
        warehouse_id=str(row["warehouse_id"]),
        display_name=row["display_name"],
        owner_user_id=row["owner_user_id"],
        storage=warehouse_pb2.S3StorageProfile(
            bucket=row["bucket"],
            key_prefix=row["key_prefix"],
            region=row["region"],
            endpoint=row["endpoint"],
            path_style_access=row["path_style_access"],
            flavor=FLAVORS[row["flavor"]],
            sts_enabled=row["sts_enabled"],
            sts_role_arn=row["sts_role_arn"],
        ),
        state=WAREHOUSE_STATES[row["state"]],
        catalog_warehouse_id=str(row["catalog_warehouse_id"]),
        catalog_warehouse_name=row["catalog_warehouse_name"],
        credential_version=row["credential_version"],
        create_time=timestamp(row["created_at"]),
        update_time=timestamp(row["updated_at"]),
        caller_role=caller_role.proto,
    )


def member(row: Row) -> warehouse_pb2.WarehouseMember:
    return warehouse_pb2.WarehouseMember(
        user_id=row["user_id"],
        role=Role[row["role"]].proto,
        granted_by_user_id=row["granted_by_user_id"],
        grant_time=timestamp(row["granted_at"]),
    )


def binding(
    row: Row,
    catalog_uri: str,
    project_id: str,
    token: AccessToken | None,
    backend: registry_service_pb2.CatalogBackend.ValueType = registry_service_pb2.CATALOG_BACKEND_REST,
) -> registry_service_pb2.CatalogBinding:
    answer = registry_service_pb2.CatalogBinding(
        warehouse_id=str(row["warehouse_id"]),
        owner_user_id=row["owner_user_id"],
        state=WAREHOUSE_STATES[row["state"]],
        backend=backend,
        catalog_uri=catalog_uri,
        catalog_warehouse=row["catalog_warehouse_name"],
        project_id=project_id,
        credential_version=row["credential_version"],
    )
    if token is not None:
        answer.catalog_token = token.token
        answer.catalog_token_expire_time.FromNanoseconds(int(token.expires_at * 1e9))
    return answer


def execution(row: Row, outputs: Iterable[Row]) -> execution_pb2.Execution:
    message = execution_pb2.Execution(
        execution_id=row["execution_id"],
        warehouse_id=str(row["warehouse_id"]),
        computing_unit_id=row["computing_unit_id"],
        workflow_id=row["workflow_id"],
        owner_user_id=row["owner_user_id"],
        state=EXECUTION_STATES[row["state"]],
        cleanup_state=CLEANUP_STATES[row["cleanup_state"]],
        create_time=timestamp(row["created_at"]),
        start_time=timestamp(row["started_at"]),
        end_time=timestamp(row["ended_at"]),
        delete_time=timestamp(row["deleted_at"]),
        outputs=[
            execution_pb2.ExecutionOutput(
                operator_id=o["operator_id"],
                namespace=o["namespace"],
                table_name=o["table_name"],
                row_count=o["row_count"],
                snapshot_id=o["snapshot_id"],
                file_count=o["file_count"],
            )
            for o in outputs
        ],
    )
    if row["error_reason"]:
        message.error.CopyFrom(
            execution_pb2.ExecutionError(
                reason=row["error_reason"],
                message=row["error_message"],
                operator_id=row["error_operator_id"],
            )
        )
    json_format.ParseDict(_json(row["progress"]), message.progress)
    return message


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def registration(row: Row) -> registry_service_pb2.UnitRegistration:
    return registry_service_pb2.UnitRegistration(
        computing_unit_id=row["computing_unit_id"],
        endpoint=row["endpoint"],
        capacity=row["capacity"],
        running_executions=row["running_executions"],
        queued_executions=row["queued_executions"],
        last_heartbeat_time=timestamp(row["last_heartbeat_at"]),
        lease_expire_time=timestamp(row["lease_expires_at"]),
        state=(
            registry_service_pb2.UNIT_REGISTRATION_STATE_HEALTHY
            if row["state"] == "HEALTHY"
            else registry_service_pb2.UNIT_REGISTRATION_STATE_LOST
        ),
    )


_UNIT_STATES = {
    "PROVISIONING": computing_unit_service_pb2.COMPUTING_UNIT_STATE_PROVISIONING,
    "RUNNING": computing_unit_service_pb2.COMPUTING_UNIT_STATE_RUNNING,
    "STOPPED": computing_unit_service_pb2.COMPUTING_UNIT_STATE_STOPPED,
    "FAILED": computing_unit_service_pb2.COMPUTING_UNIT_STATE_FAILED,
    "DELETING": computing_unit_service_pb2.COMPUTING_UNIT_STATE_DELETING,
}


def owned_unit(
    row: Row, shared_with: Iterable[str], *, workers_confined: bool
) -> computing_unit_service_pb2.ComputingUnit:
    """A unit as the public API shows it; shared_with only for its owner's eyes,
    workers_confined as its latest registration said (false before the first)."""
    return computing_unit_service_pb2.ComputingUnit(
        computing_unit_id=row["unit_id"],
        display_name=row["display_name"],
        owner_user_id=row["owner_user_id"],
        cores=row["cores"],
        memory_mib=row["memory_mib"],
        state=_UNIT_STATES[row["state"]],
        state_message=row["state_message"],
        default_unit=row["default_unit"],
        shared_with_user_ids=sorted(shared_with),
        create_time=timestamp(row["created_at"]),
        last_use_time=timestamp(row["last_used_at"]),
        workers_confined=workers_confined,
    )
