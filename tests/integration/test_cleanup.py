"""What a failed or cancelled execution leaves behind is removed, whoever learns of the failure.

Each scenario stops an execution mid-write: one output (1,000 rows) committed, the next one's
table created and a file of it written but never committed. After the registry records the
cleanup DONE, the bucket holds no object under the execution's data folders, the catalog no
table of it, and no RPC of the result service serves a row of it; an execution whose id
sanitizes to the same table names keeps every row.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import grpc
import pytest
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from lake_tables.naming import RESULTS, result_table
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import (
    SLOW_UDF,
    UnitClient,
    bucket_keys,
    filtered_numbers,
    new_user,
    workflow,
)
from tests.integration.mesh import RegistryClient, bearer, create_warehouse, user
from tests.integration.results import ResultClient, results_as
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2_grpc,
    registry_service_pb2,
    workflow_pb2,
)

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


def own_unit_client(stack: Stack, user_id: str) -> tuple[UnitClient, int]:
    """A client of user_id's default unit (started if it is not running), and its pid."""
    unit = stack.unit_for(user_id)
    channel = grpc.insecure_channel(unit.target)
    client = UnitClient(
        execution_service_pb2_grpc.ExecutionServiceStub(channel),
        bearer(stack.unit_token(user_id, unit.unit_id)),
        unit.unit_id,
        user_id,
    )
    return client, unit.pid


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


def test_cancel_mid_write_leaves_nothing_of_it_and_spares_an_execution_named_alike(
    stack: Stack,
) -> None:
    client, warehouse_id, grant = new_user(stack, "cancelled")
    base = f"cl{uuid.uuid4().hex[:8]}"
    # Ids that sanitize alike: the same table names but for their digests.
    neighbour = client.finish(
        client.submit(
            warehouse_id, filtered_numbers(50, 1, "true"), execution_id=f"{base}_x"
        ).execution_id
    )
    assert neighbour.state == EX.EXECUTION_STATE_SUCCEEDED, neighbour.error

    run = start_mid_write(stack, client, warehouse_id, grant, execution_id=f"{base}-x")
    client.cancel(run.execution_id, "enough")
    ended = client.finish(run.execution_id)
    assert ended.state == EX.EXECUTION_STATE_CANCELLED
    recorded = assert_nothing_left(stack, client.user_id, run)
    assert client.get(run.execution_id).cleanup_state == EX.CLEANUP_STATE_DONE
    assert recorded.error.reason == "CANCELLED_BY_USER"

    results = results_as(stack, client.user_id)
    assert results.console(run.execution_id).messages  # kept: they explain the end
    rows, _ = results.all_rows(neighbour.execution_id, "kept")
    assert sorted(int(r["id"]) for r in rows) == list(range(50))


def test_a_unit_killed_mid_write_is_cleaned_up_after_by_the_lease_sweep(
    stack: Stack, crashing: Owner
) -> None:
    client, pid = own_unit_client(stack, crashing.user_id)
    run = start_mid_write(stack, client, crashing.warehouse_id, crashing.grant)
    os.killpg(pid, signal.SIGKILL)
    recorded = assert_nothing_left(stack, crashing.user_id, run)
    assert recorded.error.reason == "COMPUTING_UNIT_LOST"


def test_a_unit_killed_mid_write_and_restarted_is_cleaned_up_after(
    stack: Stack, crashing: Owner
) -> None:
    client, pid = own_unit_client(stack, crashing.user_id)
    run = start_mid_write(stack, client, crashing.warehouse_id, crashing.grant)
    os.killpg(pid, signal.SIGKILL)
    restarted, new_pid = own_unit_client(stack, crashing.user_id)
    assert new_pid != pid
    recorded = assert_nothing_left(stack, crashing.user_id, run)
    # Whichever came first: the lease sweep, or the restarted unit's registration.
    assert recorded.error.reason in ("COMPUTING_UNIT_LOST", "COMPUTING_UNIT_RESTARTED")
    assert restarted.get(run.execution_id).cleanup_state == EX.CLEANUP_STATE_DONE
