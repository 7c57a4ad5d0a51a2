"""The whole journey with the real grpcurl binary against the gateway alone: register a
warehouse, create a computing unit and share it, submit a workflow written as JSON to it,
watch it to the end, read a page, list the snapshots and read the result as it was at the
first one, and delete the unit; over TLS verified with the stack's CA (`-cacert`), as a user
calls the gateway (`-plaintext` against a stack without TLS)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from google.protobuf import json_format

from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from tests.integration.mesh import grpcurl, grpcurl_transport

pytestmark = pytest.mark.integration

API = "texera.lake.v1"
ROWS = 48_000

#: What a user writes: the workflow as JSON (grpcurl takes the proto's field names).
WORKFLOW = {
    "workflow_id": "journey",
    "operators": [
        {"operator_id": "numbers", "range_source": {"end": ROWS, "partitions": 48}},
        {
            "operator_id": "squares",
            "input_operator_ids": ["numbers"],
            "projection": {
                "columns": [
                    {"expression": "id"},
                    {"expression": "id * id", "alias": "square"},
                ]
            },
            "materialize": True,
        },
    ],
}


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON documents grpcurl prints one after the other (one per streamed message)."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    while (position := len(text) - len(text[position:].lstrip())) < len(text):
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
    return documents


def test_the_journey_with_grpcurl(short_lived_stack: Stack) -> None:
    """On the stack whose unit commits after every wave of tasks, so the result has several
    snapshots."""
    stack = short_lived_stack
    gateway = stack.target("gateway")
    token = stack.token(f"journey-{uuid.uuid4().hex[:6]}")
    flags = (*grpcurl_transport(stack), "-H", f"authorization: Bearer {token}")

    def call(method: str, body: dict[str, Any], timeout: float = 60) -> list[dict[str, Any]]:
        answer = grpcurl(
            *flags, "-d", "@", gateway, f"{API}.{method}", stdin=json.dumps(body), timeout=timeout
        )
        return _documents(answer.stdout)

    grant = stack.provision_bucket("journey")
    registration = json_format.MessageToDict(
        create_warehouse_request(grant, name="journey"), preserving_proto_field_name=True
    )
    [created] = call("WarehouseService/CreateWarehouse", registration, timeout=120)
    warehouse_id = created["warehouse"]["warehouse_id"]
    assert created["warehouse"]["state"] == "WAREHOUSE_STATE_ACTIVE"

    [unit] = call(
        "ComputingUnitService/CreateComputingUnit",
        {"computing_unit": {"display_name": "journey", "cores": 2, "memory_mib": 1024}},
    )
    unit_id = unit["computing_unit"]["computing_unit_id"]
    assert unit["computing_unit"]["state"] == "COMPUTING_UNIT_STATE_PROVISIONING"
    [listed] = call("ComputingUnitService/ListComputingUnits", {})
    assert [u["computing_unit_id"] for u in listed["computing_units"]] == [unit_id]
    [shared] = call(
        "ComputingUnitService/ShareComputingUnit",
        {"computing_unit_id": unit_id, "user_id": "journey-friend"},
    )
    assert shared["computing_unit"]["shared_with_user_ids"] == ["journey-friend"]

    # The submission waits for the new unit to start (within its deadline).
    [submitted] = call(
        "ExecutionService/SubmitExecution",
        {"warehouse_id": warehouse_id, "workflow": WORKFLOW, "computing_unit_id": unit_id},
        timeout=300,
    )
    assert submitted["execution"]["computing_unit_id"] == unit_id
    execution_id = submitted["execution"]["execution_id"]
    events = call("ExecutionService/WatchExecution", {"execution_id": execution_id}, timeout=300)
    assert events[-1]["execution"]["state"] == "EXECUTION_STATE_SUCCEEDED"
    assert {"EXECUTION_STATE_RUNNING"} <= {e["execution"]["state"] for e in events}

    result = {"execution_id": execution_id, "operator_id": "squares"}
    [page] = call("ResultService/ReadResultPage", {**result, "page_size": 3, "skip": 10})
    assert page["rows"] == [{"id": i, "square": i * i} for i in (10, 11, 12)]
    assert page["next_page_token"]

    [listing] = call("ResultService/ListSnapshots", result)
    snapshots = listing["snapshots"]
    assert len(snapshots) >= 2
    assert int(snapshots[-1]["summary"]["total-records"]) == ROWS
    first = snapshots[0]
    [then] = call(
        "ResultService/ReadResultPage",
        {**result, "page_size": 10_000, "snapshot": {"snapshot_id": first["snapshot_id"]}},
    )
    assert then["snapshot_id"] == first["snapshot_id"]
    assert len(then["rows"]) == int(first["summary"]["total-records"]) < ROWS
    [as_of] = call(
        "ResultService/ReadResultPage",
        {**result, "page_size": 1, "snapshot": {"as_of_time": first["commit_time"]}},
    )
    assert as_of["snapshot_id"] == first["snapshot_id"]

    [running] = call("ComputingUnitService/GetComputingUnit", {"computing_unit_id": unit_id})
    assert running["computing_unit"]["state"] == "COMPUTING_UNIT_STATE_RUNNING"
    call("ComputingUnitService/DeleteComputingUnit", {"computing_unit_id": unit_id}, timeout=120)
    [after] = call("ComputingUnitService/ListComputingUnits", {})
    assert after == {}
