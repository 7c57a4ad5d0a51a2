"""What the benchmarks share: a user's warehouse on the embedded stack, and executions."""

from __future__ import annotations

import time

import grpc
from google.protobuf import json_format
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2_grpc,
    workflow_pb2,
)

USER = "bench"


def metadata(stack: Stack) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {stack.token(USER)}"),)


def plan(rows: int) -> workflow_pb2.Workflow:
    """A range with a few computed columns: cheap to compute, so writing dominates."""
    return json_format.ParseDict(
        {
            "workflow_id": "write-benchmark",
            "operators": [
                {"operator_id": "numbers", "range_source": {"end": rows, "partitions": 8}},
                {
                    "operator_id": "rows",
                    "input_operator_ids": ["numbers"],
                    "projection": {
                        "columns": [
                            {"expression": "id"},
                            {"expression": "id % 97", "alias": "bucket"},
                            {"expression": "id * 0.5", "alias": "half"},
                            {"expression": "concat('row-', id)", "alias": "label"},
                        ]
                    },
                    "materialize": True,
                },
            ],
        },
        workflow_pb2.Workflow(),
    )


def create_warehouse(stack: Stack, grant: BucketGrant) -> warehouse_pb2.Warehouse:
    stub = warehouse_service_pb2_grpc.WarehouseServiceStub(
        grpc.insecure_channel(stack.target("warehouse-service"))
    )
    request = create_warehouse_request(grant, name="benchmark")
    return stub.CreateWarehouse(request, metadata=metadata(stack), timeout=60).warehouse


def run_execution(
    stack: Stack, warehouse_id: str, flow: workflow_pb2.Workflow
) -> tuple[float, execution_pb2.Execution]:
    stub = execution_service_pb2_grpc.ExecutionServiceStub(
        grpc.insecure_channel(stack.target("cu-service"))
    )
    started = time.perf_counter()
    submitted = stub.SubmitExecution(
        execution_service_pb2.SubmitExecutionRequest(warehouse_id=warehouse_id, workflow=flow),
        metadata=metadata(stack),
        timeout=600,
    ).execution
    final = None
    watch = execution_service_pb2.WatchExecutionRequest(execution_id=submitted.execution_id)
    for event in stub.WatchExecution(watch, metadata=metadata(stack), timeout=3600):
        final = event.execution
    elapsed = time.perf_counter() - started
    assert final is not None
    if final.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
        raise SystemExit(f"the execution did not succeed: {final.error}")
    return elapsed, final


def user_catalog(stack: Stack, warehouse: warehouse_pb2.Warehouse, name: str) -> RestCatalog:
    """The warehouse's catalog, as pyiceberg in the user's own process sees it."""
    return RestCatalog(
        name, uri=f"{stack.catalog_url}/catalog", warehouse=warehouse.catalog_warehouse_name
    )
