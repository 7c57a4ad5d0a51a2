"""Running executions through outages of the registry's database longer than a lease, on a
stack of their own (they stop its PostgreSQL, which the catalog uses too): three users, each on
a computing unit of their own.

While the database is down no heartbeat can be recorded and every lease lapses; the units
heartbeat on, and the registry holds its lease sweep for a full lease once the database is
back (warehouse_service.background.leases), so their next heartbeats renew the leases before any sweep:
every execution succeeds, with every row exactly once and nothing purged. The units' commits
retry the catalog for longer than the outages (RETRY_WINDOW).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import UnitClient, own_unit_client, udf, workflow
from tests.integration.mesh import create_warehouse, user
from tests.integration.results import results_as
from texera.lake.v1 import execution_pb2, warehouse_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EX = execution_pb2
LEASE_SECONDS = 6.0
HEARTBEAT_SECONDS = 1.0
#: How long the units' commits (and telemetry appends) retry a catalog that is down.
RETRY_WINDOW = 150.0
#: Each partition of the workflow holds its one core this long.
PARTITION_SECONDS = 2.0
ROWS_PER_PARTITION = 50


@pytest.fixture(scope="module")
def leased_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack these tests may break, whose leases are much shorter than its outages."""
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("leases")), log_level="DEBUG")
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_WAREHOUSE_HEARTBEAT_INTERVAL_SECONDS": str(HEARTBEAT_SECONDS),
        "TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS": str(LEASE_SECONDS),
        "TEXERA_LAKE_CU_COMMIT_RETRY_SECONDS": str(RETRY_WINDOW),
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",
        "TEXERA_LAKE_CU_TELEMETRY_INTERVAL_SECONDS": "2",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


@dataclass
class Tenant:
    """A user with a warehouse of their own and a computing unit of their own."""

    client: UnitClient
    warehouse: warehouse_pb2.Warehouse
    offset: int


def _tenant(stack: Stack, index: int) -> Tenant:
    user_id = f"tenant{index}-{uuid.uuid4().hex[:6]}"
    warehouse = create_warehouse(user(stack, user_id), stack.provision_bucket(f"tenant{index}"))
    client, _ = own_unit_client(stack, user_id)  # the default unit, started and waited for
    return Tenant(client, warehouse, offset=index * 1_000_000)


@pytest.fixture(scope="module")
def tenants(leased_stack: Stack) -> list[Tenant]:
    """Three users, their units started side by side."""
    with ThreadPoolExecutor(3) as pool:
        made = list(pool.map(lambda index: _tenant(leased_stack, index), range(3)))
    assert len({t.client.unit_id for t in made}) == 3
    return made


def _numbers(offset: int, partitions: int) -> Any:
    """Numbers from offset, in partitions that each take PARTITION_SECONDS (one at a time on a
    unit of one core), materialized."""
    return workflow(
        [
            {
                "operator_id": "n",
                "range_source": {
                    "start": offset,
                    "end": offset + partitions * ROWS_PER_PARTITION,
                    "partitions": partitions,
                },
            },
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": udf(
                    "import time\n"
                    "def process(batches):\n"
                    f"    time.sleep({PARTITION_SECONDS})\n"
                    "    yield from batches\n",
                    [("id", "bigint")],
                ),
                "materialize": True,
            },
        ]
    )


def _query(stack: Stack, query: str, *args: Any) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        connection = await asyncpg.connect(stack.database_url)
        try:
            return list(await connection.fetch(query, *args))
        finally:
            await connection.close()

    return asyncio.run(run())


def _registrations(stack: Stack, units: list[str]) -> dict[str, tuple[str, datetime]]:
    """Each unit's registration: its state and when it registered."""
    rows = _query(
        stack,
        "SELECT computing_unit_id, state, registered_at FROM computing_units "
        "WHERE computing_unit_id = ANY($1::text[])",
        units,
    )
    return {r["computing_unit_id"]: (r["state"], r["registered_at"]) for r in rows}


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def _outage_holds(registry_log: Path) -> int:
    """How often the registry held its lease sweep after finding its database unreachable."""
    return sum(
        1
        for entry in _log(registry_log)
        if entry.get("message", "").startswith("lease sweep held")
        and "could not reach its database" in entry["message"]
    )


def _after_first_commit(tenant: Tenant, execution_id: str) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        execution = tenant.client.get(execution_id)
        assert execution.state not in (EX.EXECUTION_STATE_FAILED, EX.EXECUTION_STATE_CANCELLED)
        if execution.progress.commits >= 1:
            return
        time.sleep(0.2)
    raise AssertionError("no commit within four minutes")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("outage_seconds", [40.0, 55.0])
def test_executions_outlive_an_outage_of_the_database_longer_than_their_lease(
    leased_stack: Stack, tenants: list[Tenant], outage_seconds: float
) -> None:
    stack = leased_stack
    assert LEASE_SECONDS + 2 * HEARTBEAT_SECONDS < outage_seconds < RETRY_WINDOW
    # Long enough to run on well after the database is back.
    partitions = math.ceil((outage_seconds + 30) / PARTITION_SECONDS)
    rows = partitions * ROWS_PER_PARTITION
    executions = [
        t.client.submit(t.warehouse.warehouse_id, _numbers(t.offset, partitions)).execution_id
        for t in tenants
    ]
    for tenant, execution_id in zip(tenants, executions, strict=True):
        _after_first_commit(tenant, execution_id)
    units = [t.client.unit_id for t in tenants]
    before = _registrations(stack, units)
    registry_log = stack.log_dir / "warehouse-service.log"
    holds_before = _outage_holds(registry_log)

    stack.interrupt("postgres")
    time.sleep(outage_seconds)
    stack.resume("postgres")
    resumed = datetime.now().astimezone()
    finished = [
        t.client.finish(execution_id, timeout=400)
        for t, execution_id in zip(tenants, executions, strict=True)
    ]

    for execution in finished:
        assert state_name(execution) == "SUCCEEDED", execution.error
    # The registry held its sweep after the outage, and no unit lost its registration (a unit
    # told that its lease lapsed registers again, failing what it ran).
    assert _outage_holds(registry_log) > holds_before
    after = _registrations(stack, units)
    assert after == before
    assert {state for state, _ in after.values()} == {"HEALTHY"}
    # Each execution still ran when the database came back: the sweep could have taken it.
    for tenant, execution_id in zip(tenants, executions, strict=True):
        [ended] = [
            e
            for e in _log(stack.unit_root / "logs" / f"{tenant.client.unit_id}.log")
            if e.get("message") == "execution ended" and e.get("execution_id") == execution_id
        ]
        assert datetime.fromisoformat(ended["time"]) > resumed

    # Every row exactly once, readable; nothing purged, now or a few cleanup rounds later.
    time.sleep(3)
    cleanups = _query(
        stack,
        "SELECT execution_id, state, cleanup_state FROM executions "
        "WHERE execution_id = ANY($1::text[])",
        executions,
    )
    assert {(r["state"], r["cleanup_state"]) for r in cleanups} == {("SUCCEEDED", "NOT_NEEDED")}
    for tenant, execution in zip(tenants, finished, strict=True):
        [output] = execution.outputs
        assert output.row_count == rows
        results = results_as(stack, tenant.client.user_id)
        read, _ = results.all_rows(execution.execution_id, "slow", page_size=1000)
        assert sorted(int(row["id"]) for row in read) == list(
            range(tenant.offset, tenant.offset + rows)
        )
        catalog = rest_catalog(stack, tenant.warehouse.catalog_warehouse_name)
        assert catalog.table_exists((output.namespace, output.table_name))
