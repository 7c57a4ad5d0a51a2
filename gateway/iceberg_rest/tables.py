"""An execution's tables as the Iceberg REST catalog shows them, and which executions' it
shows: running and succeeded ones, never a failed or cancelled one's."""

from __future__ import annotations

from lake_tables.naming import CONSOLE_LOGS, RUNTIME_STATS, execution_table
from texera.lake.v1 import execution_pb2, iceberg_access_service_pb2

#: Executions whose tables a reader sees.
VISIBLE_STATES = (execution_pb2.EXECUTION_STATE_RUNNING, execution_pb2.EXECUTION_STATE_SUCCEEDED)

ia = iceberg_access_service_pb2
_TELEMETRY = (
    (RUNTIME_STATS, ia.ICEBERG_TABLE_KIND_RUNTIME_STATISTICS),
    (CONSOLE_LOGS, ia.ICEBERG_TABLE_KIND_CONSOLE_MESSAGES),
)


def iceberg_tables(execution: execution_pb2.Execution) -> list[ia.IcebergTable]:
    """An execution's tables: each result, then its statistics and its console messages."""
    results = [
        ia.IcebergTable(
            kind=ia.ICEBERG_TABLE_KIND_RESULT,
            operator_id=output.operator_id,
            namespace=output.namespace,
            name=output.table_name,
        )
        for output in execution.outputs
    ]
    own = execution_table(execution.execution_id)
    return results + [
        ia.IcebergTable(kind=kind, namespace=namespace, name=own) for namespace, kind in _TELEMETRY
    ]
