"""Submitting workflows to a computing unit and following them, as a client does."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from service_runtime.execution_states import TERMINAL
from tests.integration.mesh import Metadata, bearer, create_warehouse, user
from texera.lake.v1 import (
    computing_unit_service_pb2,
    computing_unit_service_pb2_grpc,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    workflow_pb2,
)

es = execution_service_pb2


def workflow(operators: list[dict[str, Any]], workflow_id: str = "wf") -> workflow_pb2.Workflow:
    return json_format.ParseDict(
        {"workflow_id": workflow_id, "operators": operators}, workflow_pb2.Workflow()
    )


def filtered_numbers(end: int, partitions: int, condition: str) -> workflow_pb2.Workflow:
    """Numbers 0..end-1 in `partitions` partitions; those meeting `condition` materialized as "kept"."""
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": end, "partitions": partitions}},
            {
                "operator_id": "kept",
                "input_operator_ids": ["n"],
                "filter": {"condition": condition},
                "materialize": True,
            },
        ]
    )


@dataclass
class UnitClient:
    stub: execution_service_pb2_grpc.ExecutionServiceStub
    metadata: Metadata
    #: The unit submissions name unless they name one themselves ("" is the default unit).
    unit_id: str = ""
    #: Whose token metadata carries.
    user_id: str = ""

    def submit(
        self, warehouse_id: str, flow: workflow_pb2.Workflow, **fields: Any
    ) -> execution_pb2.Execution:
        fields.setdefault("computing_unit_id", self.unit_id)
        request = es.SubmitExecutionRequest(warehouse_id=warehouse_id, workflow=flow, **fields)
        return self.stub.SubmitExecution(request, metadata=self.metadata, timeout=180).execution

    def get(self, execution_id: str) -> execution_pb2.Execution:
        request = es.GetExecutionRequest(execution_id=execution_id)
        return self.stub.GetExecution(request, metadata=self.metadata, timeout=60).execution

    def cancel(self, execution_id: str, reason: str = "") -> execution_pb2.Execution:
        request = es.CancelExecutionRequest(execution_id=execution_id, reason=reason)
        return self.stub.CancelExecution(request, metadata=self.metadata, timeout=60).execution

    def watch(self, execution_id: str, timeout: float = 300) -> list[execution_pb2.Execution]:
        request = es.WatchExecutionRequest(execution_id=execution_id)
        return [
            r.execution
            for r in self.stub.WatchExecution(request, metadata=self.metadata, timeout=timeout)
        ]

    def finish(self, execution_id: str, timeout: float = 300) -> execution_pb2.Execution:
        """Watches the execution to its end."""
        return self.watch(execution_id, timeout)[-1]

    def wait_for_state(
        self, execution_id: str, state: int, timeout: float = 120
    ) -> execution_pb2.Execution:
        deadline = time.monotonic() + timeout
        while True:
            execution = self.get(execution_id)
            if (
                execution.state == state
                or execution.state in TERMINAL
                or time.monotonic() > deadline
            ):
                return execution
            time.sleep(0.2)


#: Owner of the unit most tests run on, shared with each test user (one JVM for them all).
SHARED_UNIT_OWNER = "unit-owner"


def share_unit(stack: Stack, unit_id: str, owner: str, user_id: str) -> None:
    channel = stack.channel("gateway", presenting=None)
    computing_unit_service_pb2_grpc.ComputingUnitServiceStub(channel).ShareComputingUnit(
        computing_unit_service_pb2.ShareComputingUnitRequest(
            computing_unit_id=unit_id, user_id=user_id
        ),
        metadata=bearer(stack.token(owner)),
        timeout=60,
    )
    channel.close()


def unit_as(stack: Stack, user_id: str) -> UnitClient:
    """Calls, as user_id, the ExecutionService of the tests' shared unit (shared with user_id
    here)."""
    unit = stack.unit_for(SHARED_UNIT_OWNER)
    if user_id != SHARED_UNIT_OWNER:
        share_unit(stack, unit.unit_id, SHARED_UNIT_OWNER, user_id)
    channel = stack.unit_channel(unit)
    return UnitClient(
        execution_service_pb2_grpc.ExecutionServiceStub(channel),
        stack.unit_call_metadata(user_id, unit.unit_id),
        unit.unit_id,
        user_id,
    )


def own_unit_client(stack: Stack, user_id: str) -> tuple[UnitClient, int]:
    """A client of user_id's default unit (started if it is not running), and its pid."""
    unit = stack.unit_for(user_id)
    channel = stack.unit_channel(unit)
    client = UnitClient(
        execution_service_pb2_grpc.ExecutionServiceStub(channel),
        stack.unit_call_metadata(user_id, unit.unit_id),
        unit.unit_id,
        user_id,
    )
    return client, unit.pid


def bucket_keys(stack: Stack, bucket: str) -> list[str]:
    """Every object key in a bucket, as the storage holds it."""
    listed = stack.s3.admin_s3().list_objects_v2(Bucket=bucket)
    return [item["Key"] for item in listed.get("Contents", [])]


def udf(code: str, columns: list[tuple[str, str]]) -> dict[str, Any]:
    return {"code": code, "output_columns": [{"name": n, "data_type": t} for n, t in columns]}


def udf_workflow(
    operator_id: str, python_udf: dict[str, Any], end: int = 1, partitions: int = 1
) -> workflow_pb2.Workflow:
    """A range of `end` numbers in `partitions` through one user's function (see udf),
    materialized."""
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": end, "partitions": partitions}},
            {
                "operator_id": operator_id,
                "input_operator_ids": ["n"],
                "python_udf": python_udf,
                "materialize": True,
            },
        ]
    )


def sleeping_udf(seconds: float) -> dict[str, Any]:
    """A function that sleeps seconds once per partition, then passes its `id`s on."""
    code = (
        f"import time\ndef process(batches):\n    time.sleep({seconds})\n    yield from batches\n"
    )
    return udf(code, [("id", "bigint")])


def new_user(stack: Stack, name: str) -> tuple[UnitClient, str, BucketGrant]:
    """A user with a warehouse on a bucket of their own, and a client of the tests' shared
    unit."""
    user_id = f"{name}-{uuid.uuid4().hex[:6]}"
    grant = stack.provision_bucket(name)
    warehouse = create_warehouse(user(stack, user_id), grant)
    return unit_as(stack, user_id), warehouse.warehouse_id, grant


SLOW_UDF = udf(
    "import time\n"
    "def process(batches):\n"
    "    for batch in batches:\n"
    "        time.sleep(30)\n"
    "        yield batch\n",
    [("id", "bigint")],
)


def slow_workflow() -> workflow_pb2.Workflow:
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": 100, "partitions": 2}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": SLOW_UDF,
                "materialize": True,
            },
        ]
    )
