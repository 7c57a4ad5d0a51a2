"""Deleting executions, retention policies and table maintenance, on a stack of their own
(the last tests kill its registry and start it again).

No Spark here: each execution's tables are made as a computing unit makes them (a result
table, a runtime_stats table appended several times, a console_logs table), by a unit that
registers, binds the execution and reports its states, and is never heard of again. Its
lease is long, so a RUNNING execution stays running. Users call through the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import pyarrow as pa
import pytest
import requests
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_tables.naming import (
    CONSOLE_LOGS,
    EXECUTION_ID,
    RESULTS,
    RUNTIME_STATS,
    execution_table,
    result_table,
)
from tests.conftest import RECORD_FILE, TEST_STACK_ENV, catalog_traffic
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import bucket_keys
from tests.integration.mesh import (
    BIN,
    RegistryClient,
    bad_fields,
    bearer,
    computing_unit,
    create_warehouse,
    eventually,
    reason,
    refused,
    register_unit,
    user,
)
from tests.integration.results import ResultClient
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_service_pb2_grpc,
    retention_service_pb2,
    retention_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2,
)

pytestmark = pytest.mark.integration
EX = execution_pb2
es = execution_service_pb2
rs = retention_service_pb2
#: Maintenance tends an execution's tables this long after it ended, and removes an
#: unreferenced file only once it is this old.
MARGIN_SECONDS = 3
TELEMETRY_APPENDS = 4


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("retention")
    settings = StackSettings(state_dir=str(state_dir))
    env = {
        **TEST_STACK_ENV,
        RECORD_FILE: str(catalog_traffic(state_dir)),
        "TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS": "600",
        "TEXERA_LAKE_WAREHOUSE_RETENTION_INTERVAL_SECONDS": "1",
        "TEXERA_LAKE_WAREHOUSE_ORPHAN_MARGIN_SECONDS": str(MARGIN_SECONDS),
        "TEXERA_LAKE_WAREHOUSE_CLEANUP_HOLD_SECONDS": "5",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


@dataclass
class Person:
    """A user at the gateway, and the same user at the registry (to set a warehouse up)."""

    user_id: str
    registry: RegistryClient
    executions: execution_service_pb2_grpc.ExecutionServiceStub
    retention: retention_service_pb2_grpc.RetentionServiceStub
    results: ResultClient
    metadata: Any

    def delete(self, execution_id: str) -> execution_pb2.Execution:
        return self.executions.DeleteExecution(
            es.DeleteExecutionRequest(execution_id=execution_id), metadata=self.metadata, timeout=60
        ).execution

    def get(self, execution_id: str) -> execution_pb2.Execution:
        return self.executions.GetExecution(
            es.GetExecutionRequest(execution_id=execution_id), metadata=self.metadata, timeout=60
        ).execution

    def set_policy(self, warehouse_id: str, *paths: str, **fields: Any) -> rs.RetentionPolicy:
        return self.retention.UpdateRetentionPolicy(
            rs.UpdateRetentionPolicyRequest(
                policy=rs.RetentionPolicy(warehouse_id=warehouse_id, **fields),
                update_mask=FieldMask(paths=list(paths)),
            ),
            metadata=self.metadata,
            timeout=60,
        ).policy


def person(stack: Stack, name: str) -> Person:
    user_id = f"{name}-{uuid.uuid4().hex[:6]}"
    channel = stack.channel("gateway", presenting=None)
    metadata = bearer(stack.token(user_id))
    return Person(
        user_id,
        user(stack, user_id),
        execution_service_pb2_grpc.ExecutionServiceStub(channel),
        retention_service_pb2_grpc.RetentionServiceStub(channel),
        ResultClient(result_service_pb2_grpc.ResultServiceStub(channel), metadata),
        metadata,
    )


@dataclass
class Lake:
    """A warehouse of owner's, shared with a reader and a writer, and a unit they all use."""

    stack: Stack
    owner: Person
    reader: Person
    writer: Person
    stranger: Person
    warehouse_id: str
    bucket: str
    unit_id: str
    catalog: RestCatalog
    catalog_warehouse_id: str

    def stage(
        self,
        workflow_id: str = "wf",
        *,
        by: Person | None = None,
        state: int = EX.EXECUTION_STATE_SUCCEEDED,
        before_end: Callable[[str], None] = lambda execution_id: None,
    ) -> str:
        """An execution of by (the owner by default) with its three tables written, ended in
        state (or left RUNNING); before_end(execution_id) runs just before it ends."""
        execution_id = f"ex-{uuid.uuid4().hex[:10]}"
        unit = computing_unit(self.stack, self.unit_id)
        acting = unit.for_user((by or self.owner).registry)
        acting.call(
            acting.ledger.BindExecution,
            registry_service_pb2.BindExecutionRequest(
                execution_id=execution_id,
                warehouse_id=self.warehouse_id,
                computing_unit_id=self.unit_id,
                workflow_id=workflow_id,
            ),
        )
        result = self._table(RESULTS, result_table(execution_id, "op"), execution_id)
        result.append(pa.table({"n": list(range(10))}))
        stats = self._table(RUNTIME_STATS, execution_table(execution_id), execution_id)
        for wave in range(TELEMETRY_APPENDS):
            stats.append(pa.table({"n": [wave]}))
        self._table(CONSOLE_LOGS, execution_table(execution_id), execution_id).append(
            pa.table({"n": [1]})
        )
        output = EX.ExecutionOutput(
            operator_id="op",
            namespace=RESULTS,
            table_name=result_table(execution_id, "op"),
            row_count=10,
            snapshot_id=result.refresh().metadata.current_snapshot_id or 0,
            file_count=1,
        )
        for reached in (EX.EXECUTION_STATE_RUNNING, state):
            if reached == state:
                before_end(execution_id)
            error = EX.ExecutionError(reason="OPERATOR_FAILED") if reached in _FAILED else None
            unit.call(
                unit.ledger.UpdateExecutionState,
                registry_service_pb2.UpdateExecutionStateRequest(
                    execution_id=execution_id,
                    computing_unit_id=self.unit_id,
                    state=reached,  # type: ignore[arg-type]
                    outputs=[output],
                    error=error,
                ),
            )
        return execution_id

    def _table(self, namespace: str, name: str, execution_id: str) -> Any:
        self.catalog.create_namespace_if_not_exists(namespace)
        return self.catalog.create_table(
            (namespace, name),
            schema=pa.schema([("n", pa.int64())]),
            properties={EXECUTION_ID: execution_id},
        )

    def tables(self, execution_id: str) -> list[tuple[str, str]]:
        return [
            (RESULTS, result_table(execution_id, "op")),
            (RUNTIME_STATS, execution_table(execution_id)),
            (CONSOLE_LOGS, execution_table(execution_id)),
        ]

    def table_keys(self, execution_id: str) -> list[str]:
        """The key prefixes of the execution's tables' locations in the bucket."""
        return [
            self.catalog.load_table(identifier).location().removeprefix(f"s3://{self.bucket}/")
            for identifier in self.tables(execution_id)
        ]


_FAILED = (EX.EXECUTION_STATE_FAILED, EX.EXECUTION_STATE_CANCELLED)


@pytest.fixture(scope="module")
def lake(own_stack: Stack) -> Lake:
    owner, reader, writer, stranger = (
        person(own_stack, name) for name in ("owner", "reader", "writer", "stranger")
    )
    grant = own_stack.provision_bucket("retention")
    warehouse = create_warehouse(owner.registry, grant)
    for member, role in (
        (reader, warehouse_pb2.WAREHOUSE_ROLE_READER),
        (writer, warehouse_pb2.WAREHOUSE_ROLE_WRITER),
    ):
        owner.registry.call(
            owner.registry.warehouses.ShareWarehouse,
            warehouse_service_pb2.ShareWarehouseRequest(
                warehouse_id=warehouse.warehouse_id,
                member=warehouse_pb2.WarehouseMember(user_id=member.user_id, role=role),
            ),
        )
    unit_id = register_unit(own_stack, shared_with=(owner.user_id, writer.user_id))
    catalog = rest_catalog(own_stack, f"texera-{warehouse.warehouse_id}")
    return Lake(
        own_stack,
        owner,
        reader,
        writer,
        stranger,
        warehouse.warehouse_id,
        grant.bucket,
        unit_id,
        catalog,
        warehouse.catalog_warehouse_id,
    )


def ledger_row(stack: Stack, execution_id: str) -> asyncpg.Record:
    """The ledger's own record (the queues' columns are not in the API)."""

    async def read() -> asyncpg.Record:
        connection = await asyncpg.connect(stack.database_url)
        try:
            row = await connection.fetchrow(
                "SELECT * FROM executions WHERE execution_id = $1", execution_id
            )
        finally:
            await connection.close()
        assert row is not None
        return row

    return asyncio.run(read())


def assert_gone(lake: Lake, execution_id: str, table_keys: list[str]) -> None:
    """No table of the execution in the catalog, no object under their locations."""
    for identifier in lake.tables(execution_id):
        assert not lake.catalog.table_exists(identifier), identifier
    keys = bucket_keys(lake.stack, lake.bucket)
    assert not [key for key in keys for table in table_keys if key.startswith(table + "/")]


def assert_deleted_reads(results: ResultClient, execution_id: str) -> None:
    reads: dict[str, Callable[[], Any]] = {
        "list": lambda: results.list_results(execution_id),
        "page": lambda: results.page(execution_id, "op"),
        "snapshots": lambda: results.snapshots(execution_id, "op"),
        "statistics": lambda: results.statistics(execution_id),
        "console": lambda: results.console(execution_id),
    }
    for name, read in reads.items():
        error = refused(read)
        assert error.code() == grpc.StatusCode.NOT_FOUND, (name, error.details())
        assert reason(error) == "EXECUTION_DELETED", name


def test_deleting_drops_every_table_and_file_and_keeps_a_tombstone(lake: Lake) -> None:
    execution_id = lake.stage()
    keys = lake.table_keys(execution_id)
    assert lake.owner.results.rows(execution_id, "op")

    tombstone = lake.owner.delete(execution_id)
    assert tombstone.HasField("delete_time")
    assert tombstone.state == EX.EXECUTION_STATE_SUCCEEDED
    assert list(tombstone.outputs) == []
    assert_deleted_reads(lake.owner.results, execution_id)

    eventually(
        lambda: lake.owner.get(execution_id).cleanup_state == EX.CLEANUP_STATE_DONE,
        "the deleted execution's tables dropped",
    )
    assert_gone(lake, execution_id, keys)
    recorded = lake.owner.get(execution_id)
    assert recorded.delete_time == tombstone.delete_time
    listed = lake.owner.executions.ListExecutions(
        es.ListExecutionsRequest(warehouse_id=lake.warehouse_id),
        metadata=lake.owner.metadata,
        timeout=60,
    ).executions
    assert [e.delete_time for e in listed if e.execution_id == execution_id] == [
        tombstone.delete_time
    ]
    # Deleting again answers the tombstone, and changes nothing.
    assert lake.owner.delete(execution_id) == recorded
    assert_deleted_reads(lake.reader.results, execution_id)


def test_a_failed_execution_is_deleted_with_its_telemetry(lake: Lake) -> None:
    execution_id = lake.stage(state=EX.EXECUTION_STATE_FAILED)
    keys = lake.table_keys(execution_id)
    # The failure's cleanup drops the result table and keeps statistics and console messages.
    eventually(
        lambda: lake.owner.get(execution_id).cleanup_state == EX.CLEANUP_STATE_DONE,
        "the failed execution's results dropped",
    )
    assert lake.catalog.table_exists((RUNTIME_STATS, execution_table(execution_id)))
    lake.owner.delete(execution_id)
    eventually(
        lambda: lake.owner.get(execution_id).cleanup_state == EX.CLEANUP_STATE_DONE,
        "the deleted execution's tables dropped",
    )
    assert_gone(lake, execution_id, keys)


def test_the_warehouse_owner_deletes_a_writers_execution(lake: Lake) -> None:
    execution_id = lake.stage(by=lake.writer)
    assert lake.owner.delete(execution_id).HasField("delete_time")


def test_the_submitter_deletes_its_own_execution(lake: Lake) -> None:
    execution_id = lake.stage(by=lake.writer)
    assert lake.writer.delete(execution_id).HasField("delete_time")


@pytest.mark.parametrize(
    ("who", "code", "expected"),
    [
        ("reader", grpc.StatusCode.PERMISSION_DENIED, "WAREHOUSE_ROLE_INSUFFICIENT"),
        ("stranger", grpc.StatusCode.NOT_FOUND, "EXECUTION_NOT_FOUND"),
    ],
)
def test_others_may_not_delete(lake: Lake, who: str, code: grpc.StatusCode, expected: str) -> None:
    execution_id = lake.stage()
    error = refused(lambda: getattr(lake, who).delete(execution_id))
    assert (error.code(), reason(error)) == (code, expected)
    assert not ledger_row(lake.stack, execution_id)["deleted_at"]


def test_a_writer_may_not_delete_another_users_execution(lake: Lake) -> None:
    execution_id = lake.stage()
    error = refused(lambda: lake.writer.delete(execution_id))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(error) == "WAREHOUSE_ROLE_INSUFFICIENT"


def test_a_running_execution_is_not_deleted(lake: Lake) -> None:
    execution_id = lake.stage(state=EX.EXECUTION_STATE_RUNNING)
    error = refused(lambda: lake.owner.delete(execution_id))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(error) == "EXECUTION_NOT_ENDED"
    assert lake.owner.results.rows(execution_id, "op")


@pytest.mark.parametrize("execution_id", ["", "../x", "a" * 65])
def test_a_bad_execution_id_is_refused_naming_the_field(lake: Lake, execution_id: str) -> None:
    error = refused(lambda: lake.owner.delete(execution_id))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"execution_id"}


def cli(lake: Lake, *args: str) -> str:
    return subprocess.run(
        [
            str(BIN / "texera-lake"),
            *("--state-dir", str(lake.stack.state_dir), "--user", lake.owner.user_id),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def test_deleting_from_the_command_line(lake: Lake) -> None:
    execution_id = lake.stage()
    printed = cli(lake, "execution", "delete", execution_id)
    assert f"execution {execution_id} deleted at" in printed
    listed = cli(lake, "executions", "--warehouse", lake.warehouse_id, "--limit", "500")
    assert [line.split()[1:3] for line in listed.splitlines() if execution_id in line] == [
        ["SUCCEEDED", "(deleted)"]
    ]
    assert lake.owner.get(execution_id).HasField("delete_time")


# Retention policies ----------------------------------------------------------------------


def backdate(stack: Stack, execution_id: str, hours: float) -> None:
    """Moves an execution's submission and end into the past, as if it ran back then."""

    async def update() -> None:
        connection = await asyncpg.connect(stack.database_url)
        try:
            await connection.execute(
                "UPDATE executions SET created_at = created_at - make_interval(hours => $2), "
                "ended_at = ended_at - make_interval(hours => $2) WHERE execution_id = $1",
                execution_id,
                hours,
            )
        finally:
            await connection.close()

    asyncio.run(update())


@pytest.fixture
def policy_lake(lake: Lake) -> Lake:
    """The lake with its own warehouse, whose policy these tests set."""
    grant = lake.stack.provision_bucket("policy")
    warehouse = create_warehouse(lake.owner.registry, grant)
    return Lake(
        lake.stack,
        lake.owner,
        lake.reader,
        lake.writer,
        lake.stranger,
        warehouse.warehouse_id,
        grant.bucket,
        lake.unit_id,
        rest_catalog(lake.stack, f"texera-{warehouse.warehouse_id}"),
        warehouse.catalog_warehouse_id,
    )


def test_keep_last_deletes_only_older_ended_executions_of_each_workflow(policy_lake: Lake) -> None:
    lake = policy_lake
    older = [lake.stage("wf-a") for _ in range(3)]
    newer = lake.stage("wf-a")
    running = lake.stage("wf-a", state=EX.EXECUTION_STATE_RUNNING)
    other_workflow = lake.stage("wf-b")
    # Submitted before all the others: beyond the newest two, but running, so it stays.
    backdate(lake.stack, running, 5)

    policy = lake.owner.set_policy(lake.warehouse_id, "keep_last", keep_last=2)
    assert policy.keep_last == 2
    assert not policy.HasField("max_age")

    eventually(
        lambda: all(lake.owner.get(e).cleanup_state == EX.CLEANUP_STATE_DONE for e in older[:2]),
        "the two oldest deleted by the policy",
    )
    time.sleep(3)  # a few more passes of the loop
    states = {e: lake.owner.get(e) for e in [*older, newer, running, other_workflow]}
    # wf-a, newest first: newer, older[2], older[1], older[0]; running is older than all.
    assert [states[e].HasField("delete_time") for e in older] == [True, True, False]
    for kept in (newer, other_workflow, running):
        assert not lake.owner.get(kept).HasField("delete_time"), kept
    assert lake.owner.get(running).state == EX.EXECUTION_STATE_RUNNING
    assert lake.owner.results.rows(newer, "op")


def test_max_age_deletes_what_ended_long_ago_and_nothing_younger_or_running(
    policy_lake: Lake,
) -> None:
    lake = policy_lake
    old, young = lake.stage("wf-age"), lake.stage("wf-age")
    old_running = lake.stage("wf-age", state=EX.EXECUTION_STATE_RUNNING)
    backdate(lake.stack, old, 3)
    backdate(lake.stack, old_running, 3)

    lake.owner.set_policy(lake.warehouse_id, "max_age", max_age=Duration(seconds=2 * 3600))
    eventually(
        lambda: lake.owner.get(old).cleanup_state == EX.CLEANUP_STATE_DONE,
        "the old execution deleted by the policy",
    )
    time.sleep(3)
    assert not lake.owner.get(young).HasField("delete_time")
    assert not lake.owner.get(old_running).HasField("delete_time")
    assert lake.owner.results.rows(young, "op")
    assert_deleted_reads(lake.owner.results, old)


def test_the_policy_is_the_owners_to_set_and_its_members_to_read(lake: Lake) -> None:
    lake.owner.set_policy(lake.warehouse_id, "keep_last", keep_last=100)
    got = lake.reader.retention.GetRetentionPolicy(
        rs.GetRetentionPolicyRequest(warehouse_id=lake.warehouse_id),
        metadata=lake.reader.metadata,
        timeout=60,
    ).policy
    assert (got.keep_last, got.HasField("update_time")) == (100, True)
    # An update with a mask changes only the masked field.
    both = lake.owner.set_policy(lake.warehouse_id, "max_age", max_age=Duration(seconds=86400))
    assert (both.keep_last, both.max_age.seconds) == (100, 86400)
    lake.owner.set_policy(lake.warehouse_id, max_age=Duration(seconds=0), keep_last=0)

    denied = refused(lambda: lake.writer.set_policy(lake.warehouse_id, keep_last=1))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(denied) == "WAREHOUSE_ROLE_INSUFFICIENT"
    hidden = refused(
        lambda: lake.stranger.retention.GetRetentionPolicy(
            rs.GetRetentionPolicyRequest(warehouse_id=lake.warehouse_id),
            metadata=lake.stranger.metadata,
            timeout=60,
        )
    )
    assert (hidden.code(), reason(hidden)) == (grpc.StatusCode.NOT_FOUND, "WAREHOUSE_NOT_FOUND")
    bad = refused(
        lambda: lake.owner.set_policy(lake.warehouse_id, "max_age", max_age=Duration(seconds=5))
    )
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(bad) == {"policy.max_age"}
    bad = refused(lambda: lake.owner.set_policy(lake.warehouse_id, "state", keep_last=1))
    assert bad_fields(bad) == {"update_mask.paths[0]"}


def test_the_policy_from_the_command_line(policy_lake: Lake) -> None:
    lake = policy_lake
    printed = cli(lake, "retention", "set", lake.warehouse_id, "--keep-last", "7")
    assert "maximum age no limit; keep the newest 7 per workflow" in printed
    cli(lake, "retention", "set", lake.warehouse_id, "--max-age-days", "30")
    printed = cli(lake, "retention", "get", lake.warehouse_id)
    assert "maximum age 30 days; keep the newest 7 per workflow" in printed


# Maintenance -----------------------------------------------------------------------------


def _plant(lake: Lake, table_key: str, name: str) -> str:
    key = f"{table_key}/data/{name}"
    lake.stack.s3.admin_s3().put_object(Bucket=lake.bucket, Key=key, Body=b"PAR1 orphan")
    return key


def test_maintenance_expires_telemetry_snapshots_and_removes_orphans_only(lake: Lake) -> None:
    planted: dict[str, Any] = {}

    def plant(execution_id: str) -> None:
        """Files no snapshot references, left before the execution ended (older than the
        margin when maintenance looks)."""
        result_key, stats_key, _ = lake.table_keys(execution_id)
        stats = lake.catalog.load_table((RUNTIME_STATS, execution_table(execution_id)))
        assert len(stats.snapshots()) == TELEMETRY_APPENDS
        planted["stats_key"] = stats_key
        planted["before"] = set(bucket_keys(lake.stack, lake.bucket))
        planted["orphans"] = [
            _plant(lake, stats_key, "orphan.parquet"),
            _plant(lake, result_key, "lost.parquet"),
        ]

    execution_id = lake.stage(before_end=plant)
    stats = (RUNTIME_STATS, execution_table(execution_id))
    result = (RESULTS, result_table(execution_id, "op"))
    before, orphans, stats_key = planted["before"], planted["orphans"], planted["stats_key"]

    eventually(
        lambda: ledger_row(lake.stack, execution_id)["maintenance_state"] == "DONE",
        "the ended execution's tables maintained",
    )
    assert ledger_row(lake.stack, execution_id)["maintenance_error"] == ""
    table = lake.catalog.load_table(stats)
    assert [s.snapshot_id for s in table.snapshots()] == [table.metadata.current_snapshot_id]
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == list(range(TELEMETRY_APPENDS))
    assert len(lake.catalog.load_table(result).snapshots()) == 1  # results keep theirs
    assert len(lake.owner.results.rows(execution_id, "op")) == 10

    after = set(bucket_keys(lake.stack, lake.bucket))
    assert not after & set(orphans)
    removed = before - after
    # Only the expired snapshots' manifest lists went, besides the planted files.
    assert all(key.startswith(stats_key + "/metadata/snap-") for key in removed), removed
    assert len(removed) == TELEMETRY_APPENDS - 1


# A registry killed midway -----------------------------------------------------------------


def _recorded(stack: Stack, method: str, table_name: str, status: int, action: str = "") -> bool:
    """Whether the catalog's traffic records that call on the table (a commit with an update
    of that action, if one is given), answered with status."""
    traffic = catalog_traffic(stack.state_dir)
    return any(
        entry["method"] == method
        and entry["path"].endswith(f"/tables/{table_name}")
        and entry["response"]["status"] == status
        and (
            not action
            or action
            in [u.get("action") for u in (entry["request"]["body"] or {}).get("updates", [])]
        )
        for entry in map(json.loads, traffic.read_text().splitlines())
    )


@contextlib.contextmanager
def slow_catalog(lake: Lake) -> Iterator[None]:
    """Every catalog call about the warehouse takes two seconds: a kill lands between two."""
    fault = f"{lake.stack.catalog_url}/dev/v1/warehouse/{lake.catalog_warehouse_id}/fault"
    requests.put(fault, json={"delay-seconds": 2.0}, timeout=30).raise_for_status()
    try:
        yield
    finally:
        requests.delete(fault, timeout=30).raise_for_status()


def kill_registry_once(lake: Lake, happened: Callable[[], bool], what: str) -> None:
    """Kills the registry as soon as happened(), while the catalog is slow."""
    eventually(happened, what, timeout=120)
    lake.stack.kill("warehouse-service")


def test_a_registry_killed_midway_through_a_delete_leaves_it_to_the_next(lake: Lake) -> None:
    stack = lake.stack
    execution_id = lake.stage()
    keys = lake.table_keys(execution_id)
    with slow_catalog(lake):
        lake.owner.delete(execution_id)
        kill_registry_once(
            lake,
            lambda: _recorded(stack, "DELETE", result_table(execution_id, "op"), 204),
            "the result table dropped",
        )

    row = ledger_row(stack, execution_id)
    assert row["deleted_at"] is not None
    assert row["cleanup_state"] == "PENDING"
    assert lake.catalog.table_exists((RUNTIME_STATS, execution_table(execution_id)))

    stack.resume("warehouse-service")
    eventually(
        lambda: ledger_row(stack, execution_id)["cleanup_state"] == "DONE",
        "the registry, started again, finished the delete",
    )
    assert_gone(lake, execution_id, keys)
    assert lake.owner.get(execution_id).cleanup_state == EX.CLEANUP_STATE_DONE


def test_a_registry_killed_midway_through_maintenance_leaves_it_to_the_next(lake: Lake) -> None:
    stack = lake.stack
    planted: list[str] = []
    with contextlib.ExitStack() as slow:

        def before_end(execution_id: str) -> None:
            result_key, _, _ = lake.table_keys(execution_id)
            planted.append(_plant(lake, result_key, "lost.parquet"))
            slow.enter_context(slow_catalog(lake))

        execution_id = lake.stage(before_end=before_end)
        stats = (RUNTIME_STATS, execution_table(execution_id))
        # Killed once the telemetry's snapshots are expired, before the result table is swept.
        kill_registry_once(
            lake,
            lambda: _recorded(stack, "POST", stats[1], 200, "remove-snapshots"),
            "the telemetry snapshots expired",
        )
    row = ledger_row(stack, execution_id)
    assert row["maintenance_state"] == "PENDING"
    assert planted[0] in bucket_keys(stack, lake.bucket)
    assert len(lake.catalog.load_table(stats).snapshots()) == 1

    stack.resume("warehouse-service")
    eventually(
        lambda: ledger_row(stack, execution_id)["maintenance_state"] == "DONE",
        "the registry, started again, finished the maintenance",
    )
    assert planted[0] not in bucket_keys(stack, lake.bucket)
    assert len(lake.catalog.load_table(stats).snapshots()) == 1
    assert len(lake.owner.results.rows(execution_id, "op")) == 10
