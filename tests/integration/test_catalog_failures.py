"""What a user sees when the catalog refuses or fails: its own cause, as Lakekeeper states it,
under the status that says what to do about it."""

from __future__ import annotations

import uuid

import grpc
import pyarrow as pa
import pytest
import requests

from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.integration.catalog_client import management, rest_catalog
from tests.integration.executions import new_user, workflow
from tests.integration.mesh import bearer, create_warehouse, reason_of, refused, user
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2, warehouse_service_pb2_grpc

pytestmark = pytest.mark.integration

ws = warehouse_service_pb2
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZWdpc3RyeSJ9.c2lnbmF0dXJl"


def _catalog_id(stack: Stack, warehouse_id: str) -> str:
    listed = management(stack, "GET", "/warehouse").json()["warehouses"]
    return str(next(w["id"] for w in listed if w["name"] == f"texera-{warehouse_id}"))


def test_a_catalog_that_keeps_failing_is_named_in_the_executions_error(stack: Stack) -> None:
    unit, warehouse_id, _ = new_user(stack, "catfail")
    flow = workflow([{"operator_id": "n", "range_source": {"end": 10}, "materialize": True}])
    # A first execution, so that the unit holds the warehouse's catalog when it starts failing.
    assert state_name(unit.finish(unit.submit(warehouse_id, flow).execution_id)) == "SUCCEEDED"
    fault = f"{stack.catalog_url}/dev/v1/warehouse/{_catalog_id(stack, warehouse_id)}/fault"
    cause = "the connection pool is exhausted"
    requests.put(
        fault,
        json={
            "fail-status": 500,
            "fail-type": "DatabaseError",
            "fail-message": f"{cause}; request sent with Bearer {TOKEN}",
        },
        timeout=10,
    ).raise_for_status()
    try:
        failed = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    finally:
        requests.delete(fault, timeout=10)
    assert state_name(failed) == "FAILED"
    assert failed.error.reason == "CATALOG_UNAVAILABLE"
    message = failed.error.message
    assert message.startswith("the catalog answered with an error (ServerError): ")
    assert f"DatabaseError: {cause}" in message
    assert TOKEN not in message
    assert len(message) <= 1000


def test_a_warehouse_the_catalog_protects_is_not_deleted(stack: Stack) -> None:
    owner = user(stack, f"protector-{uuid.uuid4().hex[:6]}")
    warehouse = create_warehouse(owner, stack.provision_bucket("protected"))
    catalog = rest_catalog(stack, warehouse.catalog_warehouse_name)
    catalog.create_namespace("results")
    catalog.create_table("results.kept", schema=pa.schema([("id", pa.int64())]))
    protection = f"/warehouse/{warehouse.catalog_warehouse_id}/protection"
    answer = management(stack, "POST", protection, json={"protected": True})
    assert (answer.status_code, answer.json()["protected"]) == (200, True)
    assert management(stack, "GET", f"/warehouse/{warehouse.catalog_warehouse_id}").json()[
        "protected"
    ]

    gateway = warehouse_service_pb2_grpc.WarehouseServiceStub(
        stack.channel("gateway", presenting=None)
    )
    delete = ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id, purge=True)
    error = refused(
        lambda: gateway.DeleteWarehouse(
            delete, metadata=bearer(stack.token(owner.subject)), timeout=120
        )
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "protects the warehouse" in (error.details() or "")
    assert reason_of(error) == (
        "WAREHOUSE_PROTECTED",
        {"catalog_status": "409", "catalog_error": "WarehouseProtected"},
    )
    # Nothing was deleted: the warehouse, its state and its tables are as they were.
    assert catalog.table_exists("results.kept")
    kept = owner.call(
        owner.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    )
    assert kept.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE
    refusal = management(stack, "DELETE", f"/warehouse/{warehouse.catalog_warehouse_id}")
    assert (refusal.status_code, refusal.json()["error"]["type"]) == (409, "WarehouseProtected")

    management(stack, "POST", protection, json={"protected": False}).raise_for_status()
    deleted = owner.call(owner.warehouses.DeleteWarehouse, delete)
    assert deleted.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_DELETED
