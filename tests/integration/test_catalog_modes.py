"""The journey in each catalog mode, through the gateway: submit, SUCCEEDED, pages read back,
snapshots and a read at the first one; then what each mode refuses, with status and reason.

One stack per mode, shared by the tests of that mode."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from embedded_stack.settings import StackSettings
from embedded_stack.stack import MODE_SETTING, Stack
from embedded_stack.warehouse_request import create_warehouse_request
from lake_cli.connection import Connection
from lake_tables.naming import RESULTS, result_table
from service_runtime.auth import bearer
from service_runtime.processes import ProcessFailed
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import management, rest_catalog
from tests.integration.executions import workflow
from tests.integration.mesh import bad_fields, gateway_account, reason_of, refused
from tests.integration.test_cleanup import cleaned_up, mid_write_workflow
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    result_pb2,
    result_service_pb2,
    retention_service_pb2,
    usage_pb2,
    warehouse_pb2,
    warehouse_service_pb2,
    workflow_pb2,
)
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.mode_rules import CATALOG_MODE_GLOBAL
from warehouse_service.platform_warehouse import PLATFORM_WAREHOUSE_ID

pytestmark = pytest.mark.integration

ROWS = 4_000
SQUARES = workflow(
    [
        {"operator_id": "numbers", "range_source": {"end": ROWS, "partitions": 12}},
        {
            "operator_id": "squares",
            "input_operator_ids": ["numbers"],
            "projection": {
                "columns": [{"expression": "id"}, {"expression": "id * id", "alias": "square"}]
            },
            "materialize": True,
        },
    ],
    workflow_id="modes",
)
PLATFORM = str(PLATFORM_WAREHOUSE_ID)
SMALL = workflow(
    [
        {"operator_id": "numbers", "range_source": {"end": 10}},
        {
            "operator_id": "squares",
            "input_operator_ids": ["numbers"],
            "projection": {"columns": [{"expression": "id"}]},
            "materialize": True,
        },
    ],
    workflow_id="modes-small",
)


@pytest.fixture(scope="module", params=[mode.value for mode in CatalogMode])
def mode_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A stack in one catalog mode, whose units commit after every wave of tasks (so a result
    has several snapshots)."""
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp(f"mode-{request.param}")))
    env = {
        **TEST_STACK_ENV,
        MODE_SETTING: request.param,
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def connect(stack: Stack, user_id: str) -> Connection:
    return Connection(stack.channel("gateway", presenting=None), (bearer(stack.token(user_id)),))


@dataclass
class Journey:
    user: Connection
    execution: execution_pb2.Execution
    #: What the submission named: a registered warehouse per-user, none in global modes.
    named_warehouse_id: str


def submit(
    user: Connection, warehouse_id: str, graph: workflow_pb2.Workflow = SQUARES
) -> execution_pb2.Execution:
    return user.executions.SubmitExecution(
        execution_service_pb2.SubmitExecutionRequest(warehouse_id=warehouse_id, workflow=graph),
        metadata=user.metadata,
        timeout=300,
    ).execution


def finished(user: Connection, execution_id: str) -> execution_pb2.Execution:
    events = user.executions.WatchExecution(
        execution_service_pb2.WatchExecutionRequest(execution_id=execution_id),
        metadata=user.metadata,
        timeout=300,
    )
    return [event.execution for event in events][-1]


@pytest.fixture(scope="module")
def journey(mode_stack: Stack) -> Journey:
    user = connect(mode_stack, f"modes-{uuid.uuid4().hex[:6]}")
    warehouse_id = ""
    if not mode_stack.catalog_mode.is_global:
        grant = mode_stack.provision_bucket("modes")
        warehouse_id = user.warehouses.CreateWarehouse(
            create_warehouse_request(grant, name="modes"), metadata=user.metadata, timeout=120
        ).warehouse.warehouse_id
    execution = submit(user, warehouse_id)
    return Journey(user, finished(user, execution.execution_id), warehouse_id)


def test_the_journey(mode_stack: Stack, journey: Journey) -> None:
    user, execution = journey.user, journey.execution
    assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED
    expected_warehouse = (
        PLATFORM if mode_stack.catalog_mode.is_global else journey.named_warehouse_id
    )
    assert execution.warehouse_id == expected_warehouse

    result: dict[str, Any] = {"execution_id": execution.execution_id, "operator_id": "squares"}
    page = user.results.ReadResultPage(
        result_service_pb2.ReadResultPageRequest(**result, page_size=3, skip=10),
        metadata=user.metadata,
    )
    assert [(row["id"], row["square"]) for row in page_rows(page)] == [
        (i, i * i) for i in (10, 11, 12)
    ]
    assert page.next_page_token

    snapshots = user.results.ListSnapshots(
        result_service_pb2.ListSnapshotsRequest(**result), metadata=user.metadata
    ).snapshots
    assert len(snapshots) >= 2
    assert int(snapshots[-1].summary["total-records"]) == ROWS
    first = snapshots[0]
    then = user.results.ReadResultPage(
        result_service_pb2.ReadResultPageRequest(
            **result,
            page_size=ROWS,
            snapshot=result_pb2.SnapshotSelector(snapshot_id=first.snapshot_id),
        ),
        metadata=user.metadata,
    )
    assert len(then.rows) == int(first.summary["total-records"]) < ROWS


def page_rows(page: result_service_pb2.ReadResultPageResponse) -> list[dict[str, int]]:
    return [
        {name: int(value.number_value) for name, value in row.fields.items()} for row in page.rows
    ]


def test_per_user_needs_a_warehouse(mode_stack: Stack, journey: Journey) -> None:
    if mode_stack.catalog_mode.is_global:
        pytest.skip("the global modes take a submission without a warehouse")
    error = refused(lambda: submit(journey.user, ""))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"warehouse_id"}


def test_global_modes_refuse_warehouse_management(mode_stack: Stack, journey: Journey) -> None:
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user warehouses are managed by their users")
    user = journey.user
    grant = mode_stack.provision_bucket("refused")
    calls = {
        "CreateWarehouse": lambda: user.warehouses.CreateWarehouse(
            create_warehouse_request(grant, name="mine"), metadata=user.metadata
        ),
        "ShareWarehouse": lambda: user.warehouses.ShareWarehouse(
            warehouse_service_pb2.ShareWarehouseRequest(
                warehouse_id=PLATFORM,
                member=warehouse_pb2.WarehouseMember(
                    user_id="friend", role=warehouse_pb2.WAREHOUSE_ROLE_READER
                ),
            ),
            metadata=user.metadata,
        ),
        "DeleteWarehouse": lambda: user.warehouses.DeleteWarehouse(
            warehouse_service_pb2.DeleteWarehouseRequest(warehouse_id=PLATFORM, purge=True),
            metadata=user.metadata,
        ),
        "ArchiveWarehouse": lambda: user.warehouses.ArchiveWarehouse(
            warehouse_service_pb2.ArchiveWarehouseRequest(warehouse_id=PLATFORM),
            metadata=user.metadata,
        ),
    }
    for method, call in calls.items():
        error = refused(call)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, method
        assert reason_of(error) == (
            CATALOG_MODE_GLOBAL,
            {"catalog_mode": mode_stack.catalog_mode.value, "method": method},
        )
    listed = user.warehouses.ListWarehouses(
        warehouse_service_pb2.ListWarehousesRequest(), metadata=user.metadata
    ).warehouses
    assert [(w.warehouse_id, w.caller_role) for w in listed] == [
        (PLATFORM, warehouse_pb2.WAREHOUSE_ROLE_WRITER)
    ]
    platform = user.warehouses.GetWarehouse(
        warehouse_service_pb2.GetWarehouseRequest(warehouse_id=PLATFORM), metadata=user.metadata
    ).warehouse
    assert (platform.owner_user_id, platform.caller_role) == (
        "",
        warehouse_pb2.WAREHOUSE_ROLE_WRITER,
    )
    assert platform.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE


def test_global_modes_take_only_the_platform_warehouse(mode_stack: Stack, journey: Journey) -> None:
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user warehouses are named by id")
    user = journey.user
    named = submit(user, PLATFORM)
    assert named.warehouse_id == PLATFORM
    assert finished(user, named.execution_id).state == execution_pb2.EXECUTION_STATE_SUCCEEDED
    other = str(uuid.uuid4())
    error = refused(lambda: submit(user, other))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(error)[0] == "WAREHOUSE_NOT_FOUND"
    # Everyone's tables share the platform warehouse: none may be named directly.
    by_name = workflow(
        [
            {
                "operator_id": "theirs",
                "iceberg_table_source": {
                    "table_identifier": {"namespace": ["results"], "name": "anything"}
                },
                "materialize": True,
            }
        ]
    )
    error = refused(lambda: submit(user, "", by_name))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"workflow.operators[0].iceberg_table_source.table_identifier"}


def test_global_modes_show_executions_to_their_submitter_only(
    mode_stack: Stack, journey: Journey
) -> None:
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user warehouses are read by their owners and members")
    stranger = connect(mode_stack, f"stranger-{uuid.uuid4().hex[:6]}")
    execution_id = journey.execution.execution_id
    reads = {
        "GetExecution": lambda: stranger.executions.GetExecution(
            execution_service_pb2.GetExecutionRequest(execution_id=execution_id),
            metadata=stranger.metadata,
        ),
        "ReadResultPage": lambda: stranger.results.ReadResultPage(
            result_service_pb2.ReadResultPageRequest(
                execution_id=execution_id, operator_id="squares"
            ),
            metadata=stranger.metadata,
        ),
        "ListSnapshots": lambda: stranger.results.ListSnapshots(
            result_service_pb2.ListSnapshotsRequest(
                execution_id=execution_id, operator_id="squares"
            ),
            metadata=stranger.metadata,
        ),
    }
    for method, read in reads.items():
        error = refused(read)
        assert error.code() == grpc.StatusCode.NOT_FOUND, method
        assert reason_of(error)[0] == "EXECUTION_NOT_FOUND", method

    def listed(who: Connection) -> set[str]:
        request = execution_service_pb2.ListExecutionsRequest(warehouse_id=PLATFORM)
        answer = who.executions.ListExecutions(request, metadata=who.metadata)
        return {e.execution_id for e in answer.executions}

    assert execution_id in listed(journey.user)
    assert execution_id not in listed(stranger)


def platform_catalog(stack: Stack) -> Catalog:
    """The platform warehouse's catalog, opened independently of the mesh: the SQL catalog
    with the bucket's key (global-sql), or the REST catalog as its admin (global-rest)."""
    name = f"texera-{PLATFORM}"
    if stack.catalog_mode is CatalogMode.GLOBAL_REST:
        return rest_catalog(stack, name)
    grant = stack.platform_bucket
    assert grant is not None
    return SqlCatalog(
        name,
        uri=stack.sql_catalog_url,
        **{
            "s3.endpoint": grant.endpoint,
            "s3.region": grant.region,
            "s3.access-key-id": grant.access_key.access_key_id,
            "s3.secret-access-key": grant.access_key.secret_access_key,
            "s3.path-style-access": "true",
        },
    )


def test_global_sql_keeps_tables_in_its_sql_catalog(mode_stack: Stack, journey: Journey) -> None:
    """Read independently of the mesh: the result is a table of the SQL catalog."""
    if mode_stack.catalog_mode is not CatalogMode.GLOBAL_SQL:
        pytest.skip("only global-sql has a SQL catalog")
    [output] = [o for o in journey.execution.outputs if o.operator_id == "squares"]
    catalog = platform_catalog(mode_stack)
    table = catalog.load_table((output.namespace, output.table_name))
    assert table.scan().to_arrow().num_rows == ROWS
    assert mode_stack.platform_bucket is not None
    assert table.location().startswith(f"s3://{mode_stack.platform_bucket.bucket}/")


def test_global_modes_clean_up_a_cancelled_execution(mode_stack: Stack, journey: Journey) -> None:
    """Cancelled with one output committed and the next being written: the registry's cleaner
    purges its tables from the platform warehouse's catalog, whichever it is."""
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user cleanup is tests/integration/test_cleanup.py's")
    user = journey.user
    execution_id = submit(user, "", mid_write_workflow()).execution_id
    first = (RESULTS, result_table(execution_id, "first"))
    catalog = platform_catalog(mode_stack)
    deadline = time.monotonic() + 180
    while not catalog.table_exists(first):
        assert time.monotonic() < deadline, "the first output was never written"
        time.sleep(0.5)
    user.executions.CancelExecution(
        execution_service_pb2.CancelExecutionRequest(execution_id=execution_id, reason="test"),
        metadata=user.metadata,
    )
    recorded = cleaned_up(gateway_account(mode_stack), execution_id)
    assert list(recorded.outputs) == []
    assert not catalog.table_exists(first)
    assert not catalog.table_exists((RESULTS, result_table(execution_id, "slow")))


def test_global_modes_give_usage_and_deletion_to_the_submitter_only(
    mode_stack: Stack, journey: Journey
) -> None:
    """An execution's usage and its deletion are its submitter's; the platform warehouse's
    usage and retention policy are nobody's to read or set through the API."""
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user usage and deletion are test_usage's and test_retention's")
    user = journey.user
    stranger = connect(mode_stack, f"stranger-{uuid.uuid4().hex[:6]}")
    execution = finished(user, submit(user, "", SMALL).execution_id)
    assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED
    execution_id = execution.execution_id

    def usage_of(who: Connection) -> usage_pb2.ExecutionUsage:
        return who.warehouses.GetExecutionUsage(
            usage_pb2.GetExecutionUsageRequest(execution_id=execution_id), metadata=who.metadata
        ).execution_usage

    def until(check: Any, what: str) -> None:
        deadline = time.monotonic() + 90
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.5)

    until(lambda: not usage_of(user).measurement_pending, "the usage was never read")
    measured = usage_of(user).usage
    assert (measured.tables, measured.rows > 0) == (3, True)

    error = refused(lambda: usage_of(stranger))
    assert (error.code(), reason_of(error)[0]) == (
        grpc.StatusCode.NOT_FOUND,
        "EXECUTION_NOT_FOUND",
    )
    delete = execution_service_pb2.DeleteExecutionRequest(execution_id=execution_id)
    error = refused(lambda: stranger.executions.DeleteExecution(delete, metadata=stranger.metadata))
    assert (error.code(), reason_of(error)[0]) == (
        grpc.StatusCode.NOT_FOUND,
        "EXECUTION_NOT_FOUND",
    )
    platform_wide = {
        "GetWarehouseUsage": lambda: user.warehouses.GetWarehouseUsage(
            usage_pb2.GetWarehouseUsageRequest(warehouse_id=PLATFORM), metadata=user.metadata
        ),
        "GetRetentionPolicy": lambda: user.retention.GetRetentionPolicy(
            retention_service_pb2.GetRetentionPolicyRequest(warehouse_id=PLATFORM),
            metadata=user.metadata,
        ),
        "UpdateRetentionPolicy": lambda: user.retention.UpdateRetentionPolicy(
            retention_service_pb2.UpdateRetentionPolicyRequest(
                policy=retention_service_pb2.RetentionPolicy(warehouse_id=PLATFORM, keep_last=1)
            ),
            metadata=user.metadata,
        ),
    }
    for method, call in platform_wide.items():
        error = refused(call)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, method
        assert reason_of(error)[0] == CATALOG_MODE_GLOBAL, method

    deleted = user.executions.DeleteExecution(delete, metadata=user.metadata).execution
    assert deleted.HasField("delete_time")
    [output] = [o for o in execution.outputs if o.operator_id == "squares"]
    catalog = platform_catalog(mode_stack)
    until(
        lambda: not catalog.table_exists((output.namespace, output.table_name)),
        "the deleted execution's result was never dropped",
    )
    until(
        lambda: (now := usage_of(user)).usage.tables == 0 and not now.measurement_pending,
        "the deleted execution's usage never went to zero",
    )


def test_a_global_registry_finds_its_platform_warehouse_and_refuses_moved_settings(
    mode_stack: Stack, journey: Journey
) -> None:
    """Last of a mode's tests: it starts more registries on the stack's database."""
    if not mode_stack.catalog_mode.is_global:
        pytest.skip("per-user mode has no platform warehouse")

    def catalog_names() -> list[str]:
        listed = management(mode_stack, "GET", "/warehouse").json()["warehouses"]
        return sorted(w["name"] for w in listed)

    before = catalog_names()
    mode_stack.start_part("registry-again", "warehouse_service")
    mode_stack.stop_part("registry-again")
    assert catalog_names() == before
    platform_in_catalog = f"texera-{PLATFORM}" in before
    assert platform_in_catalog is (mode_stack.catalog_mode is CatalogMode.GLOBAL_REST)
    listed = journey.user.warehouses.ListWarehouses(
        warehouse_service_pb2.ListWarehousesRequest(), metadata=journey.user.metadata
    ).warehouses
    assert [w.warehouse_id for w in listed] == [PLATFORM]

    with pytest.raises(ProcessFailed, match="TEXERA_LAKE_PLATFORM_"):
        mode_stack.start_part(
            "registry-moved", "warehouse_service", {"TEXERA_LAKE_PLATFORM_KEY_PREFIX": "moved"}
        )
