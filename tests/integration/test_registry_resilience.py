"""The registry, and executions, through outages of the PostgreSQL server (which the catalog
uses too) and of the catalog, on a stack of their own (they stop them).

Its computing unit commits after every wave of tasks and retries commits for
RETRY_WINDOW seconds; leases are long enough that the unit outlives the
outages (its loss is another story).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import grpc
import pytest

from embedded_stack.postgres import ensure_database
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_tables.naming import COMMIT_SEQUENCE
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import management, rest_catalog, warehouse_request
from tests.integration.executions import UnitClient, sleeping_udf, unit_as, workflow
from tests.integration.mesh import bearer, create_warehouse, reason_of, refused, user
from tests.integration.results import ResultClient, results_like
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2,
)
from warehouse_service.api.warehouses import catalog_name, derived_warehouse_id
from warehouse_service.store.db import DATABASE_UNAVAILABLE
from warehouse_service.store.migrate import migrate, migrations

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ws = warehouse_service_pb2
EX = execution_pb2
RETRY_WINDOW = 12.0
ROWS = 4800


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack these tests may break without disturbing the others."""
    settings = StackSettings(
        state_dir=str(tmp_path_factory.mktemp("resilience")), log_level="DEBUG"
    )
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_WAREHOUSE_CATALOG_ATTEMPTS": "2",
        "TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS": "300",
        "TEXERA_LAKE_CU_COMMIT_RETRY_SECONDS": str(RETRY_WINDOW),
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",
        "TEXERA_LAKE_CU_TELEMETRY_INTERVAL_SECONDS": "2",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _catalog_names(stack: Stack) -> list[str]:
    answer = management(stack, "GET", "/warehouse", params=[("warehouseStatus", "active")]).json()
    return [w["name"] for w in answer["warehouses"]]


def test_database_restart_during_traffic_loses_and_duplicates_nothing(own_stack: Stack) -> None:
    stack = own_stack
    client = user(stack, f"traffic-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("traffic")
    request_ids = [str(uuid.uuid4()) for _ in range(10)]
    created: dict[str, str] = {}
    errors: list[grpc.StatusCode] = []
    started = threading.Event()

    def traffic() -> None:
        for index, request_id in enumerate(request_ids):
            while True:
                try:
                    warehouse = create_warehouse(
                        client, grant, key_prefix=f"t{index}", request_id=request_id
                    )
                    created[request_id] = warehouse.warehouse_id
                    break
                except grpc.RpcError as exc:
                    errors.append(exc.code())
                    time.sleep(0.3)  # a client retrying with the same request_id
            if index == 2:
                started.set()

    worker = threading.Thread(target=traffic)
    worker.start()
    assert started.wait(120)
    stack.interrupt("postgres")
    during = refused(
        lambda: client.call(client.warehouses.ListWarehouses, ws.ListWarehousesRequest())
    )
    assert during.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(during)[0] == DATABASE_UNAVAILABLE
    time.sleep(2)
    stack.resume("postgres")
    worker.join(180)

    assert not worker.is_alive()
    stack.check_running()  # the registry never crashed
    assert set(errors) == {grpc.StatusCode.UNAVAILABLE}
    assert len(created) == len(request_ids)
    assert len(set(created.values())) == len(request_ids)
    listed = client.call(
        client.warehouses.ListWarehouses, ws.ListWarehousesRequest(page_size=100)
    ).warehouses
    assert sorted(w.warehouse_id for w in listed) == sorted(created.values())
    names = _catalog_names(stack)
    for warehouse_id in created.values():
        assert names.count(catalog_name(warehouse_id)) == 1


def test_catalog_outage_leaves_no_row_and_a_retry_creates_once(own_stack: Stack) -> None:
    stack = own_stack
    client = user(stack, f"outage-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("outage")
    request_id = str(uuid.uuid4())
    stack.interrupt("dev-catalog")
    try:
        error = refused(lambda: create_warehouse(client, grant, request_id=request_id))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert not client.call(
            client.warehouses.ListWarehouses, ws.ListWarehousesRequest()
        ).warehouses
    finally:
        stack.resume("dev-catalog")
    warehouse = create_warehouse(client, grant, request_id=request_id)
    again = create_warehouse(client, grant, request_id=request_id)
    assert again.warehouse_id == warehouse.warehouse_id
    assert _catalog_names(stack).count(warehouse.catalog_warehouse_name) == 1


def test_a_warehouse_whose_answer_was_lost_is_adopted_not_duplicated(own_stack: Stack) -> None:
    stack = own_stack
    owner = f"lost-{uuid.uuid4().hex[:6]}"
    client = user(stack, owner)
    grant = stack.provision_bucket("lost")
    request_id = str(uuid.uuid4())
    name = catalog_name(derived_warehouse_id(owner, request_id))
    # The catalog created it, but the registry never heard back.
    earlier = management(stack, "POST", "/warehouse", json=warehouse_request(grant, name)).json()

    warehouse = create_warehouse(client, grant, request_id=request_id)
    assert warehouse.catalog_warehouse_id == earlier["id"]
    assert _catalog_names(stack).count(name) == 1


async def test_replicas_migrating_at_once_apply_each_migration_once(own_stack: Stack) -> None:
    url = ensure_database(own_stack.database_url, f"migrations_{uuid.uuid4().hex[:8]}")
    first, second = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        applied = await asyncio.gather(migrate(first), migrate(second))  # type: ignore[arg-type]
        versions = [version for version, _, _ in migrations()]
        assert sorted(applied[0] + applied[1]) == versions
        rows = await first.fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert [row["version"] for row in rows] == versions
    finally:
        await first.close()
        await second.close()


# Executions through outages of the database -------------------------------------------


def _slow_numbers() -> Any:
    """ROWS numbers in 24 partitions, each held a second: several waves, one commit each."""
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": ROWS, "partitions": 24}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": sleeping_udf(1.0),
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


def _wait_for_log(stack: Stack, unit_id: str, message: str, execution_id: str) -> None:
    """Until the unit logs message about the execution (its state cannot be read meanwhile:
    a final state is shown once the registry has recorded it)."""
    deadline = time.monotonic() + RETRY_WINDOW * 5
    while time.monotonic() < deadline:
        if any(
            entry.get("message") == message and entry.get("execution_id") == execution_id
            for entry in _unit_log(stack, unit_id)
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"the unit did not log {message!r}")


def _telemetry(results: ResultClient, execution_id: str) -> tuple[list[str], set[str]]:
    """The execution's console messages and the operators its statistics name."""
    console = [m.message for m in results.console(execution_id, page_size=1000).messages]
    stats = results.statistics(execution_id, page_size=1000)
    return console, {s.operator_id for s in stats.statistics}


def test_an_outage_within_the_retry_window_delays_the_execution_and_loses_nothing(
    own_stack: Stack,
) -> None:
    stack = own_stack
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
    rows, _ = results.all_rows(execution_id, "slow", page_size=1000)
    assert sorted(int(row["id"]) for row in rows) == list(range(ROWS))  # each row exactly once
    catalog = rest_catalog(stack, warehouse.catalog_warehouse_name)
    table = catalog.load_table((output.namespace, output.table_name))
    sequences = [s.summary[COMMIT_SEQUENCE] for s in table.snapshots() if s.summary]
    assert sorted(sequences, key=int) == [str(n) for n in range(1, len(sequences) + 1)]
    console, operators = _telemetry(results, execution_id)
    assert any("succeeded" in message for message in console)
    assert operators == {"n", "slow"}


def test_an_outage_past_the_retry_window_fails_cleanly_and_keeps_the_telemetry(
    own_stack: Stack,
) -> None:
    stack = own_stack
    client, warehouse = _new_user(stack, "stranded")
    warehouse_id = warehouse.warehouse_id
    execution_id = client.submit(warehouse_id, _slow_numbers()).execution_id
    _after_first_commit(client, execution_id)
    stack.interrupt("postgres")
    try:
        # Meanwhile, whoever needs the registry's database hears that it is down.
        gateway = execution_service_pb2_grpc.ExecutionServiceStub(
            stack.channel("gateway", presenting=None)
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
        warehouse_read = refused(
            lambda: registry.call(
                registry.warehouses.GetWarehouse,
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id=warehouse_id),
            )
        )
        console_read = refused(lambda: results_like(stack, client).console(execution_id))
        for error in (submission, read, warehouse_read, console_read):
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert reason_of(error)[0] == DATABASE_UNAVAILABLE, error.details()
            assert "database" in (error.details() or "")
        _wait_for_log(stack, client.unit_id, "execution failed", execution_id)
    finally:
        stack.resume("postgres")  # the last telemetry append is still being retried
    execution = client.finish(execution_id)

    assert state_name(execution) == "FAILED"
    assert execution.error.reason == "CATALOG_UNAVAILABLE", execution.error
    # The catalog's own cause, as its error body states it (the catalog's database is the
    # PostgreSQL that went down).
    assert "DatabaseError: the catalog's database failed" in execution.error.message
    assert list(execution.outputs) == []
    assert _retried(stack, client.unit_id, "table commit") >= 2
    console, operators = _telemetry(results_like(stack, client), execution_id)
    assert operators == {"n", "slow"}
    assert any(execution.error.message in message for message in console)
