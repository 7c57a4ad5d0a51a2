"""Executions through outages of the PostgreSQL server that the catalog and the registry use,
on a stack of their own (they stop it).

Its computing unit commits after every wave of tasks and retries commits for
RETRY_WINDOW seconds; leases are long enough that the unit outlives the
outages (their loss is another story).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_client.executions import state_name
from service_runtime.errors import status_details
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import UnitClient, udf, unit_as, workflow
from tests.integration.mesh import bearer, create_warehouse, refused, user
from tests.integration.results import ResultClient, results_like
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2,
)
from warehouse_service.db import DATABASE_UNAVAILABLE

pytestmark = pytest.mark.integration
EX = execution_pb2
RETRY_WINDOW = 20.0
ROWS = 4800


@pytest.fixture(scope="module")
def outage_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("outages")), log_level="DEBUG")
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS": "300",
        "TEXERA_LAKE_CU_COMMIT_RETRY_SECONDS": str(RETRY_WINDOW),
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",
        "TEXERA_LAKE_CU_TELEMETRY_INTERVAL_SECONDS": "2",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _slow_numbers() -> Any:
    """ROWS numbers in 24 partitions, each held a second: several waves, one commit each."""
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": ROWS, "partitions": 24}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": udf(
                    "import time\ndef process(batches):\n    time.sleep(1.0)\n    yield from batches\n",
                    [("id", "bigint")],
                ),
                "materialize": True,
            },
        ]
    )


def _new_user(stack: Stack, name: str) -> tuple[UnitClient, warehouse_pb2.Warehouse]:
    user_id = f"{name}-{uuid.uuid4().hex[:6]}"
    warehouse = create_warehouse(user(stack, user_id), stack.provision_bucket(name))
    return unit_as(stack, user_id), warehouse


def _after_first_commit(client: UnitClient, execution_id: str) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        execution = client.get(execution_id)
        assert execution.state not in (EX.EXECUTION_STATE_FAILED, EX.EXECUTION_STATE_CANCELLED)
        if execution.progress.commits >= 1:
            return
        time.sleep(0.1)
    raise AssertionError("no commit within four minutes")


def _unit_log(stack: Stack, unit_id: str) -> list[dict[str, Any]]:
    lines = (stack.unit_root / "logs" / f"{unit_id}.log").read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def _retried(stack: Stack, unit_id: str, what: str) -> int:
    return sum(
        1
        for entry in _unit_log(stack, unit_id)
        if entry.get("message") == "transient failure; retrying" and entry.get("what") == what
    )


def _reason(error: grpc.RpcError) -> str:
    for detail in status_details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


def _telemetry(results: ResultClient, execution_id: str) -> tuple[list[str], set[str]]:
    """The execution's console messages and the operators its statistics name."""
    console = [m.message for m in results.console(execution_id, page_size=1000).messages]
    stats = results.statistics(execution_id, page_size=1000)
    return console, {s.operator_id for s in stats.statistics}


def test_an_outage_within_the_retry_window_delays_the_execution_and_loses_nothing(
    outage_stack: Stack,
) -> None:
    stack = outage_stack
    client, warehouse = _new_user(stack, "steady")
    warehouse_id = warehouse.warehouse_id
    execution_id = client.submit(warehouse_id, _slow_numbers()).execution_id
    _after_first_commit(client, execution_id)
    stack.interrupt("postgres")
    time.sleep(10)
    stack.resume("postgres")
    execution = client.finish(execution_id)

    assert state_name(execution) == "SUCCEEDED", execution.error
    assert _retried(stack, client.unit_id, "table commit") >= 1  # a commit met the outage
    [output] = execution.outputs
    assert output.row_count == ROWS
    results = results_like(stack, client)
    rows = results.all_rows(execution_id, "slow")
    assert sorted(row["id"] for row in rows) == list(range(ROWS))  # each row exactly once
    catalog = rest_catalog(stack, warehouse.catalog_warehouse_name)
    table = catalog.load_table((output.namespace, output.table_name))
    sequences = [s.summary["texera.commit-sequence"] for s in table.snapshots() if s.summary]
    assert sorted(sequences, key=int) == [str(n) for n in range(1, len(sequences) + 1)]
    console, operators = _telemetry(results, execution_id)
    assert any("succeeded" in message for message in console)
    assert operators == {"n", "slow"}


def test_an_outage_past_the_retry_window_fails_cleanly_and_keeps_the_telemetry(
    outage_stack: Stack,
) -> None:
    stack = outage_stack
    client, warehouse = _new_user(stack, "stranded")
    warehouse_id = warehouse.warehouse_id
    execution_id = client.submit(warehouse_id, _slow_numbers()).execution_id
    _after_first_commit(client, execution_id)
    stack.interrupt("postgres")
    try:
        # Meanwhile, whoever needs the registry's database hears that it is down.
        gateway = execution_service_pb2_grpc.ExecutionServiceStub(
            grpc.insecure_channel(stack.target("gateway"))
        )
        as_user = bearer(stack.token(client.user_id))
        submission = refused(
            lambda: gateway.SubmitExecution(
                execution_service_pb2.SubmitExecutionRequest(
                    warehouse_id=warehouse_id, workflow=_slow_numbers()
                ),
                metadata=as_user,
                timeout=60,
            )
        )
        read = refused(
            lambda: gateway.GetExecution(
                execution_service_pb2.GetExecutionRequest(execution_id=execution_id),
                metadata=as_user,
                timeout=60,
            )
        )
        registry = user(stack, client.user_id)
        warehouse = refused(
            lambda: registry.call(
                registry.warehouses.GetWarehouse,
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id=warehouse_id),
            )
        )
        for error in (submission, read, warehouse):
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert _reason(error) == DATABASE_UNAVAILABLE, error.details()
            assert "database" in (error.details() or "")
        time.sleep(max(0.0, RETRY_WINDOW + 10 - 1))
    finally:
        stack.resume("postgres")
    execution = client.finish(execution_id)

    assert state_name(execution) == "FAILED"
    assert execution.error.reason == "CATALOG_UNAVAILABLE", execution.error
    assert list(execution.outputs) == []
    assert _retried(stack, client.unit_id, "table commit") >= 2
    console, operators = _telemetry(results_like(stack, client), execution_id)
    assert operators == {"n", "slow"}
    assert any(execution.error.message in message for message in console)
