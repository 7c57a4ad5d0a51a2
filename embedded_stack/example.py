"""The example `make run` runs once the stack is up: a user brings a bucket, registers it as a
warehouse (in a global catalog mode: uses the platform warehouse), runs examples/sales.yaml
and reads its result, all through the gateway."""

from __future__ import annotations

from pathlib import Path

from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from lake_cli.connection import Connection
from lake_cli.executions import follow, load_workflow
from lake_cli.results import print_page
from service_runtime.auth import bearer
from texera.lake.v1 import execution_service_pb2, result_service_pb2

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: The example's user and workflow.
USER = "demo"
WORKFLOW = "sales.yaml"
RESULT = "ranked"


def run_example(stack: Stack) -> None:
    """Runs the example, printing each step; raises what fails."""
    workflow = load_workflow(EXAMPLES / WORKFLOW)
    connection = Connection(
        stack.channel("gateway", presenting=None),
        (bearer(stack.token(USER)),),
    )
    warehouse_id = ""  # a global mode's platform warehouse
    if stack.catalog_mode.is_global:
        print(f"\nExample: {USER} uses the platform warehouse ({stack.catalog_mode})", flush=True)
    else:
        grant = stack.provision_bucket(USER)
        print(f"\nExample: {USER} registers bucket {grant.bucket} as a warehouse ...", flush=True)
        warehouse_id = connection.warehouses.CreateWarehouse(
            create_warehouse_request(grant, name="example"),
            metadata=connection.metadata,
            timeout=120,
        ).warehouse.warehouse_id
        print(f"  warehouse {warehouse_id}")
    print(f"runs examples/{WORKFLOW} on it ...", flush=True)
    execution = connection.executions.SubmitExecution(
        execution_service_pb2.SubmitExecutionRequest(warehouse_id=warehouse_id, workflow=workflow),
        metadata=connection.metadata,
        timeout=300,
    ).execution
    print(f"  execution {execution.execution_id} on {execution.computing_unit_id}", flush=True)
    follow(connection, execution.execution_id)
    print(f"and reads result {RESULT!r} back:", flush=True)
    print_page(
        connection,
        result_service_pb2.ReadResultPageRequest(
            execution_id=execution.execution_id, operator_id=RESULT
        ),
    )
    connection.channel.close()
