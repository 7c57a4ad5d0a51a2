"""What a failed or cancelled execution leaves behind is removed, whoever learns of the failure.

Each scenario stops an execution mid-write: one output (1,000 rows) committed, the next one's
table created and a file of it written but never committed. After the registry records the
cleanup DONE, the bucket holds no object under the execution's data folders, the catalog no
table of it, and no RPC of the result service serves a row of it; an execution whose id
sanitizes to the same table names keeps every row.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
import grpc
import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from lake_tables.naming import EXECUTION_ID, RESULTS, result_table
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import (
    SLOW_UDF,
    UnitClient,
    bucket_keys,
    new_user,
    own_unit_client,
    workflow,
)
from tests.integration.mesh import (
    RegistryClient,
    computing_unit,
    create_warehouse,
    register_unit,
    user,
)
from tests.integration.results import ResultClient, results_as
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, workflow_pb2

pytestmark = pytest.mark.integration

EX = execution_pb2
T = TypeVar("T")
LEASE_SECONDS = float(TEST_STACK_ENV["TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS"])
OUTPUTS = ("first", "slow")
#: Lease, sweep, the cleaner's interval and its work, with room for a loaded machine.
CLEANUP_SECONDS = LEASE_SECONDS + 90


def mid_write_workflow() -> workflow_pb2.Workflow:
    """1,000 rows committed as "first", then "slow", whose tasks sleep before writing."""
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": 1000, "partitions": 2}},
            {
                "operator_id": "first",
                "input_operator_ids": ["n"],
                "filter": {"condition": "true"},
                "materialize": True,
            },
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": SLOW_UDF,
                "materialize": True,
            },
        ]
    )


@dataclass
class MidWrite:
    """An execution stopped between its two outputs' writes, and where its files are."""

    execution_id: str
    warehouse_id: str
    bucket: str
    #: The key prefixes of its result tables' locations in the bucket.
    table_keys: list[str]


def start_mid_write(
    stack: Stack, client: UnitClient, warehouse_id: str, grant: BucketGrant, execution_id: str = ""
) -> MidWrite:
    """Runs the workflow until "first" is committed and "slow" is being written, and adds a
    file under "slow"'s data folder as a task that never reached the commit leaves one."""
    submitted = client.submit(warehouse_id, mid_write_workflow(), execution_id=execution_id)
    execution_id = submitted.execution_id
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    deadline = time.monotonic() + 180
    while not _first_committed(client.get(execution_id)) or not catalog.table_exists(
        (RESULTS, result_table(execution_id, "slow"))
    ):
        assert time.monotonic() < deadline, "the first output was never committed"
        time.sleep(0.3)
    table_keys = [_table_key(catalog, grant.bucket, execution_id, o) for o in OUTPUTS]
    stack.s3.admin_s3().put_object(
        Bucket=grant.bucket,
        Key=f"{table_keys[1]}/data/{execution_id}/00000-0-uncommitted.parquet",
        Body=b"PAR1 never committed",
    )
    return MidWrite(execution_id, warehouse_id, grant.bucket, table_keys)


def _first_committed(execution: execution_pb2.Execution) -> bool:
    assert execution.state in (EX.EXECUTION_STATE_QUEUED, EX.EXECUTION_STATE_RUNNING), execution
    return any(o.operator_id == "first" and o.row_count == 1000 for o in execution.outputs)


def _table_key(catalog: RestCatalog, bucket: str, execution_id: str, operator_id: str) -> str:
    location: str = catalog.load_table(
        (RESULTS, result_table(execution_id, operator_id))
    ).location()
    assert location.startswith(f"s3://{bucket}/")
    return location.removeprefix(f"s3://{bucket}/").rstrip("/")


def cleaned_up(registry: RegistryClient, execution_id: str) -> execution_pb2.Execution:
    """The registry's record once the execution's cleanup is DONE."""
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        recorded = registry.call(
            registry.ledger.ResolveExecution,
            registry_service_pb2.ResolveExecutionRequest(execution_id=execution_id),
        ).execution
        if recorded.cleanup_state == EX.CLEANUP_STATE_DONE:
            return recorded  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"no cleanup done: {recorded}"
        time.sleep(0.5)


def assert_nothing_left(stack: Stack, user_id: str, run: MidWrite) -> execution_pb2.Execution:
    """Waits for the cleanup, then checks storage, the catalog and every read RPC."""
    recorded = cleaned_up(user(stack, user_id), run.execution_id)
    assert recorded.state in (EX.EXECUTION_STATE_FAILED, EX.EXECUTION_STATE_CANCELLED)
    assert list(recorded.outputs) == []

    keys = bucket_keys(stack, run.bucket)
    assert not [k for k in keys if f"/data/{run.execution_id}/" in k]
    assert not [k for k in keys for table in run.table_keys if k.startswith(table + "/")]
    catalog = rest_catalog(stack, f"texera-{run.warehouse_id}")
    for operator_id in OUTPUTS:
        assert not catalog.table_exists((RESULTS, result_table(run.execution_id, operator_id)))

    results = results_as(stack, user_id)
    assert_no_rows(results, run.execution_id)
    return recorded


def assert_no_rows(results: ResultClient, execution_id: str) -> None:
    assert served(lambda: results.list_results(execution_id).results) == []
    for operator_id in OUTPUTS:
        assert_no_rows_of(results, execution_id, operator_id)


def assert_no_rows_of(results: ResultClient, execution_id: str, operator_id: str) -> None:
    assert served(lambda: results.page(execution_id, operator_id).rows) == []
    assert served(lambda: results.snapshots(execution_id, operator_id)) == []
    stream = served(lambda: results.stream(execution_id, operator_id))
    assert sum(message.row_count for message in stream) == 0


def served(read: Callable[[], Iterable[T]]) -> list[T]:
    """What a read serves: nothing when it refuses (NOT_FOUND, or FAILED_PRECONDITION as
    readers refuse failed executions)."""
    try:
        return list(read())
    except grpc.RpcError as error:
        if error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
            return []
        raise


@dataclass
class Owner:
    user_id: str
    warehouse_id: str
    grant: BucketGrant


@pytest.fixture(scope="module")
def crashing(stack: Stack) -> Owner:
    """A user with a warehouse and a unit of their own, which these tests kill."""
    user_id = f"crashing-{uuid.uuid4().hex[:6]}"
    grant = stack.provision_bucket("crashing")
    warehouse = create_warehouse(user(stack, user_id), grant)
    return Owner(user_id, warehouse.warehouse_id, grant)


def test_cancel_mid_write_leaves_nothing_of_it(stack: Stack) -> None:
    client, warehouse_id, grant = new_user(stack, "cancelled")
    run = start_mid_write(stack, client, warehouse_id, grant)
    client.cancel(run.execution_id, "not needed any more")
    ended = client.finish(run.execution_id, timeout=120)
    assert ended.state == EX.EXECUTION_STATE_CANCELLED
    assert ended.error.reason == "CANCELLED_BY_USER"
    assert ended.error.message == "not needed any more"
    recorded = assert_nothing_left(stack, client.user_id, run)
    # The unit answers with the ledger's record once the execution ended; cancelling it again
    # changes nothing.
    assert client.get(run.execution_id) == recorded
    assert client.cancel(run.execution_id) == recorded
    assert results_as(stack, client.user_id).console(run.execution_id).messages  # kept


def test_a_unit_killed_mid_write_and_restarted_is_cleaned_up_after(
    stack: Stack, crashing: Owner
) -> None:
    client, pid = own_unit_client(stack, crashing.user_id)
    run = start_mid_write(stack, client, crashing.warehouse_id, crashing.grant)
    os.killpg(pid, signal.SIGKILL)
    restarted = restart(stack, crashing.user_id, pid)
    recorded = assert_nothing_left(stack, crashing.user_id, run)
    # Whichever came first: the lease sweep, or the restarted unit's registration.
    assert recorded.error.reason in ("COMPUTING_UNIT_LOST", "COMPUTING_UNIT_RESTARTED")
    assert restarted.get(run.execution_id).cleanup_state == EX.CLEANUP_STATE_DONE


def test_a_unit_killed_mid_write_and_gone_for_good_is_cleaned_up_after_by_the_lease_sweep(
    stack: Stack, crashing: Owner
) -> None:
    client, pid = own_unit_client(stack, crashing.user_id)
    run = start_mid_write(stack, client, crashing.warehouse_id, crashing.grant)
    os.killpg(pid, signal.SIGKILL)
    recorded = assert_nothing_left(stack, crashing.user_id, run)
    assert recorded.error.reason == "COMPUTING_UNIT_LOST"


def restart(stack: Stack, user_id: str, killed_pid: int) -> UnitClient:
    """A client of user_id's unit once it runs again, in a process other than killed_pid
    (started as soon as the registry saw the process end)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client, pid = own_unit_client(stack, user_id)
        except FileNotFoundError:  # the ended process's pid file is gone, the new one not there
            pid = killed_pid
        if pid != killed_pid:
            return client
        assert time.monotonic() < deadline, "the killed unit was never started again"
        time.sleep(0.5)


def test_tables_a_crashed_unit_never_reported_are_removed_once_the_catalog_is_back(
    stack: Stack,
) -> None:
    """No Spark here: the tables and files are made as a unit makes them; the unit registers,
    binds the execution and is never heard of again, and the catalog refuses everything about
    the warehouse for a while."""
    owner = user(stack, f"abandoned-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("abandoned")
    warehouse = create_warehouse(owner, grant)
    base = f"ab{uuid.uuid4().hex[:8]}"
    failed, alike = f"{base}-x", f"{base}_x"  # the same table names but for their digests
    catalog = rest_catalog(stack, f"texera-{warehouse.warehouse_id}")
    catalog.create_namespace_if_not_exists(RESULTS)
    staged = {}
    for execution_id in (failed, alike):
        table = catalog.create_table(
            (RESULTS, result_table(execution_id, "op")),
            schema=pa.schema([("id", pa.int64())]),
            properties={EXECUTION_ID: execution_id},
        )
        table.append(pa.table({"id": [1, 2, 3]}))
        folder = table.location().removeprefix(f"s3://{grant.bucket}/") + f"/data/{execution_id}"
        staged[execution_id] = f"{folder}/00000-0-staged.parquet"
        stack.s3.admin_s3().put_object(Bucket=grant.bucket, Key=staged[execution_id], Body=b"x")

    unit = computing_unit(stack, register_unit(stack, shared_with=(owner.subject,)))
    acting = unit.for_user(owner)
    acting.call(
        acting.ledger.BindExecution,
        registry_service_pb2.BindExecutionRequest(
            execution_id=failed, warehouse_id=warehouse.warehouse_id, computing_unit_id=unit.subject
        ),
    )
    fault = f"{stack.catalog_url}/dev/v1/warehouse/{warehouse.catalog_warehouse_id}/fault"
    requests.put(fault, json={"fail-status": 503}, timeout=30).raise_for_status()
    try:
        deadline = time.monotonic() + LEASE_SECONDS + 60
        while (ledger := cleanup_row(stack, failed))["cleanup_attempts"] == 0:
            assert time.monotonic() < deadline, "no cleanup was attempted"
            time.sleep(0.5)
        assert ledger["cleanup_state"] == "PENDING"
        assert "503" in ledger["cleanup_error"]
        assert staged[failed] in bucket_keys(stack, grant.bucket)
    finally:
        requests.delete(fault, timeout=30).raise_for_status()

    recorded = cleaned_up(owner, failed)
    assert recorded.error.reason == "COMPUTING_UNIT_LOST"
    keys = bucket_keys(stack, grant.bucket)
    assert not [k for k in keys if f"/data/{failed}/" in k]
    assert staged[alike] in keys
    assert not catalog.table_exists((RESULTS, result_table(failed, "op")))
    kept = catalog.load_table((RESULTS, result_table(alike, "op"))).scan().to_arrow()
    assert kept.column("id").to_pylist() == [1, 2, 3]


def cleanup_row(stack: Stack, execution_id: str) -> asyncpg.Record:
    """The ledger's own record of an execution's cleanup (its error is not in the API)."""

    async def read() -> asyncpg.Record:
        connection = await asyncpg.connect(stack.database_url)
        try:
            row = await connection.fetchrow(
                "SELECT cleanup_state, cleanup_attempts, cleanup_error FROM executions "
                "WHERE execution_id = $1",
                execution_id,
            )
        finally:
            await connection.close()
        assert row is not None
        return row

    return asyncio.run(read())
