"""The gateway: the one public endpoint, forwarding to the services and routing executions."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from typing import Any

import grpc
import pytest
import requests
from google.rpc import error_details_pb2

from embedded_stack.stack import Stack
from service_runtime.errors import status_details
from service_runtime.execution_states import state_name
from service_runtime.health_probe import probe
from service_runtime.ports import free_port
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import management
from tests.integration.executions import (
    UnitClient,
    filtered_numbers,
    new_user,
    slow_workflow,
    workflow,
)
from tests.integration.mesh import bad_fields, bearer, create_request, refused
from tests.integration.results import ResultClient, arrow_table, results_like
from texera.lake.v1 import (
    computing_unit_service_pb2,
    computing_unit_service_pb2_grpc,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_service_pb2,
    result_service_pb2_grpc,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

pytestmark = pytest.mark.integration

LEASE_SECONDS = float(TEST_STACK_ENV["TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS"])
EX = execution_pb2
cus = computing_unit_service_pb2


def units_of(stack: Stack) -> computing_unit_service_pb2_grpc.ComputingUnitServiceStub:
    """ComputingUnitService through the gateway."""
    return computing_unit_service_pb2_grpc.ComputingUnitServiceStub(
        stack.channel("gateway", presenting=None)
    )


def _through(stack: Stack, unit: UnitClient) -> tuple[UnitClient, ResultClient]:
    """Execution and result clients calling the gateway as unit's user."""
    channel = stack.channel("gateway", presenting=None)
    metadata = bearer(stack.token(unit.user_id))
    return (
        UnitClient(
            execution_service_pb2_grpc.ExecutionServiceStub(channel),
            metadata,
            unit.unit_id,
            unit.user_id,
        ),
        ResultClient(result_service_pb2_grpc.ResultServiceStub(channel), metadata),
    )


def _warehouses(stack: Stack, part: str) -> warehouse_service_pb2_grpc.WarehouseServiceStub:
    """WarehouseService of part: a gateway as a user calls it, the registry as the gateway."""
    presenting = "gateway" if part == "warehouse-service" else None
    return warehouse_service_pb2_grpc.WarehouseServiceStub(
        stack.channel(part, presenting=presenting)
    )


def _log_entries(stack: Stack, part: str, request_id: str) -> list[dict[str, Any]]:
    lines = (stack.log_dir / f"{part}.log").read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    return [entry for entry in entries if entry.get("request_id") == request_id]


def test_a_whole_execution_through_the_gateway(stack: Stack) -> None:
    direct, warehouse_id, _ = new_user(stack, "edge")
    unit, results = _through(stack, direct)
    flow = filtered_numbers(50_000, 4, "id % 2 = 1")
    execution = unit.submit(warehouse_id, flow)
    assert execution.computing_unit_id == direct.unit_id
    events = unit.watch(execution.execution_id)
    assert state_name(events[-1]) == "SUCCEEDED"
    assert unit.get(execution.execution_id) == direct.get(execution.execution_id)

    direct_results = results_like(stack, direct)
    page = results.page(execution.execution_id, "kept", page_size=5, skip=10)
    assert page == direct_results.page(execution.execution_id, "kept", page_size=5, skip=10)
    streamed = arrow_table(results.stream(execution.execution_id, "kept", max_batch_rows=4096))
    assert streamed == arrow_table(direct_results.stream(execution.execution_id, "kept"))
    assert streamed.num_rows == 25_000
    listed = unit.stub.ListExecutions(
        execution_service_pb2.ListExecutionsRequest(), metadata=unit.metadata, timeout=30
    )
    assert [e.execution_id for e in listed.executions] == [execution.execution_id]


def test_errors_and_request_ids_pass_through(stack: Stack) -> None:
    grant = stack.provision_bucket("ids")

    def metadata(part: str) -> Any:
        return (*bearer(stack.token_for(part, "ids-user")), ("x-request-id", "edge-request-1"))

    bad = create_request(grant, name="")
    error = refused(
        lambda: _warehouses(stack, "gateway").CreateWarehouse(
            bad, metadata=metadata("gateway"), timeout=60
        )
    )
    direct = refused(
        lambda: _warehouses(stack, "warehouse-service").CreateWarehouse(
            bad, metadata=metadata("warehouse-service"), timeout=60
        )
    )
    assert error.code() == direct.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == bad_fields(direct) == {"warehouse.display_name"}
    assert error.details() == direct.details()
    call: Any = error  # a failed call is a grpc.Call too
    assert dict(call.initial_metadata() or ())["x-request-id"] == "edge-request-1"
    assert _log_entries(stack, "warehouse-service", "edge-request-1")


def test_a_bad_token_goes_no_further_than_the_gateway(stack: Stack) -> None:
    metadata = (("authorization", "Bearer not-a-token"), ("x-request-id", "edge-forged-1"))
    error = refused(
        lambda: _warehouses(stack, "gateway").ListWarehouses(
            warehouse_service_pb2.ListWarehousesRequest(), metadata=metadata, timeout=30
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _log_entries(stack, "gateway", "edge-forged-1")
    assert not _log_entries(stack, "warehouse-service", "edge-forged-1")


def test_the_callers_deadline_reaches_the_backend(stack: Stack) -> None:
    direct, warehouse_id, _ = new_user(stack, "deadline")
    done = direct.finish(
        direct.submit(
            warehouse_id,
            workflow([{"operator_id": "n", "range_source": {"end": 10}, "materialize": True}]),
        ).execution_id
    )
    catalog_id = next(
        w["id"]
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == f"texera-{warehouse_id}"
    )
    fault = f"{stack.catalog_url}/dev/v1/warehouse/{catalog_id}/fault"
    metadata = (*bearer(stack.token(direct.user_id)), ("x-request-id", "edge-deadline-1"))
    stub = result_service_pb2_grpc.ResultServiceStub(stack.channel("gateway", presenting=None))
    requests.put(fault, json={"delay-seconds": 5}, timeout=10).raise_for_status()
    try:
        error = refused(
            lambda: stub.GetResult(
                result_service_pb2.GetResultRequest(
                    execution_id=done.execution_id, operator_id="n"
                ),
                metadata=metadata,
                timeout=1.5,
            )
        )
    finally:
        requests.delete(fault, timeout=10)
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    [started] = [
        e
        for e in _log_entries(stack, "result-service", "edge-deadline-1")
        if e["message"] == "rpc started"
    ]
    # The caller's 1.5 s, less what has passed, rounded up to gRPC's timeout units on each hop.
    assert 0 < started["timeout_ms"] <= 1600


@pytest.fixture(scope="module")
def strict_gateway(stack: Stack) -> str:
    """A second gateway: one call a second (bursts of 3) per user, and a result service that is
    not there; its part's name."""
    stack.start_part(
        "strict-gateway",
        "gateway",
        {
            "TEXERA_LAKE_GATEWAY_RATE_PER_SECOND": "1",
            "TEXERA_LAKE_GATEWAY_RATE_BURST": "3",
            "TEXERA_LAKE_GATEWAY_RESULT_TARGET": f"127.0.0.1:{free_port('127.0.0.1')}",
            "TEXERA_LAKE_GATEWAY_HEALTH_INTERVAL_SECONDS": "0.5",
        },
        serving=False,
    )
    return "strict-gateway"


def test_each_user_has_a_rate_limit(stack: Stack, strict_gateway: str) -> None:
    stub = _warehouses(stack, strict_gateway)

    def call(user: str) -> Any:
        return stub.ListWarehouses(
            warehouse_service_pb2.ListWarehousesRequest(),
            metadata=bearer(stack.token(user)),
            timeout=30,
        )

    user = f"busy-{uuid.uuid4().hex[:6]}"
    for _ in range(3):
        call(user)
    error = refused(lambda: call(user))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    retry = _retry_delay(error)
    assert 0 < retry <= 1.0
    call(f"other-{uuid.uuid4().hex[:6]}")  # another user is not held back
    time.sleep(retry)
    call(user)


def _retry_delay(error: grpc.RpcError) -> float:
    for detail in status_details(error):
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return float(info.retry_delay.ToTimedelta().total_seconds())
    raise AssertionError("no RetryInfo")


def test_health_follows_the_backends(stack: Stack, strict_gateway: str) -> None:
    strict, tls = stack.target(strict_gateway), stack.client_tls(None)
    deadline = time.monotonic() + 30
    while probe(strict, service="texera.lake.v1.WarehouseService", tls=tls) != "SERVING":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert probe(strict, service="texera.lake.v1.ResultService", tls=tls) == "NOT_SERVING"
    assert probe(strict, tls=tls) == "NOT_SERVING"
    names = ("Warehouse", "ComputingUnit", "Execution", "Result")
    for name in ("", *(f"texera.lake.v1.{n}Service" for n in names)):
        assert probe(stack.target("gateway"), service=name, tls=tls) == "SERVING"


def test_a_crashed_unit_fails_its_execution_and_the_next_submission_starts_it_again(
    stack: Stack,
) -> None:
    direct, warehouse_id, _ = new_user(stack, "failover")
    unit, _ = _through(stack, direct)
    own = (
        units_of(stack)
        .CreateComputingUnit(
            cus.CreateComputingUnitRequest(
                computing_unit=cus.ComputingUnit(display_name="crashy", cores=1, memory_mib=1024)
            ),
            metadata=unit.metadata,
            timeout=60,
        )
        .computing_unit
    )
    doomed = unit.submit(warehouse_id, slow_workflow(), computing_unit_id=own.computing_unit_id)
    assert doomed.computing_unit_id == own.computing_unit_id
    running = unit.wait_for_state(doomed.execution_id, EX.EXECUTION_STATE_RUNNING)
    assert state_name(running) == "RUNNING"

    os.killpg(stack.unit_for(direct.user_id, own.computing_unit_id).pid, signal.SIGKILL)
    killed_at = time.monotonic()
    while state_name(ended := unit.get(doomed.execution_id)) not in ("FAILED", "SUCCEEDED"):
        assert time.monotonic() - killed_at < LEASE_SECONDS + 10
        time.sleep(0.25)
    assert state_name(ended) == "FAILED"
    assert ended.error.reason == "COMPUTING_UNIT_LOST"
    watched = unit.watch(doomed.execution_id)  # the registry's record answers for a lost unit
    assert [state_name(e) for e in watched] == ["FAILED"]

    after = unit.submit(
        warehouse_id,
        workflow([{"operator_id": "n", "range_source": {"end": 5}, "materialize": True}]),
        computing_unit_id=own.computing_unit_id,
    )
    assert after.computing_unit_id == own.computing_unit_id
    assert state_name(unit.finish(after.execution_id)) == "SUCCEEDED"
    units_of(stack).DeleteComputingUnit(
        cus.DeleteComputingUnitRequest(computing_unit_id=own.computing_unit_id),
        metadata=unit.metadata,
        timeout=120,
    )


def test_unknown_units_and_other_users_executions_are_not_found(stack: Stack) -> None:
    direct, warehouse_id, _ = new_user(stack, "router")
    unit, _ = _through(stack, direct)
    flow = workflow([{"operator_id": "n", "range_source": {"end": 5}, "materialize": True}])
    error = refused(lambda: unit.submit(warehouse_id, flow, computing_unit_id="cu-nowhere"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    mine = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    stranger = UnitClient(unit.stub, bearer(stack.token("stranger")), "stranger")
    for call in (
        lambda: stranger.get(mine.execution_id),
        lambda: stranger.watch(mine.execution_id),
        lambda: stranger.cancel(mine.execution_id),
    ):
        assert refused(call).code() == grpc.StatusCode.NOT_FOUND
