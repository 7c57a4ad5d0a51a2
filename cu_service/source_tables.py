"""The tables a workflow's Iceberg sources read, checked against the caller's warehouse.

A source names a table of the warehouse directly, or the result of an earlier execution,
which the registry resolves (the caller must be allowed to read it, and it must be in the same
warehouse). In the platform warehouse of a global mode, which holds every user's tables, only
results are accepted: a table named directly might be anybody's.
"""

from __future__ import annotations

import grpc

from catalog_map.platform import PLATFORM_OWNER
from catalog_map.registry import RegistryReader
from service_runtime.errors import FieldViolation, ServiceError, invalid_argument
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import workflow_pb2

#: A source operator's id -> the identifier of the table it reads.
SourceTables = dict[str, tuple[str, ...]]


def _rejected(field_path: str, description: str) -> ServiceError:
    return invalid_argument([FieldViolation(field_path, description)])


async def resolve_source_tables(
    workflow: workflow_pb2.Workflow,
    binding: registry_service_pb2.CatalogBinding,
    registry: RegistryReader,
) -> SourceTables:
    tables: SourceTables = {}
    for index, op in enumerate(workflow.operators):
        if op.WhichOneof("kind") != "iceberg_table_source":
            continue
        source = op.iceberg_table_source
        source_path = f"workflow.operators[{index}].iceberg_table_source"
        if source.WhichOneof("table") == "table_identifier":
            if binding.owner_user_id == PLATFORM_OWNER:
                raise _rejected(
                    f"{source_path}.table_identifier",
                    "the platform warehouse is read through results of your own executions "
                    "only (name one in result)",
                )
            identifier = source.table_identifier
            tables[op.operator_id] = (*identifier.namespace, identifier.name)
            continue
        tables[op.operator_id] = await _result_table(
            source.result, binding.warehouse_id, registry, f"{source_path}.result"
        )
    return tables


async def _result_table(
    result: workflow_pb2.ResultReference,
    warehouse_id: str,
    registry: RegistryReader,
    field_path: str,
) -> tuple[str, str]:
    """The table of an earlier execution's result, which must be in warehouse_id."""
    try:
        resolved = await registry.resolve_execution(result.execution_id)
    except ServiceError as exc:
        if exc.code != grpc.StatusCode.NOT_FOUND:
            raise
        raise _rejected(field_path, f"no execution {result.execution_id}") from exc
    if resolved.execution.warehouse_id != warehouse_id:
        raise _rejected(field_path, "that result is in another warehouse")
    for output in resolved.execution.outputs:
        if output.operator_id == result.operator_id:
            return (output.namespace, output.table_name)
    raise _rejected(field_path, "that execution has no such result")
