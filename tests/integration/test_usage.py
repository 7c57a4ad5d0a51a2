"""Usage per warehouse and per execution, through the gateway and the real registry, checked
against pyiceberg's own reading of the same tables' manifests (every file the current
snapshot references, with its size and record count), after executions, and after rows were
appended to and deleted from a result table."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import grpc
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.stack import Stack
from lake_cli.__main__ import main as cli
from lake_tables.naming import CONSOLE_LOGS, RESULTS, RUNTIME_STATS, execution_table
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import filtered_numbers, udf, unit_as, workflow
from tests.integration.mesh import (
    RegistryClient,
    bad_fields,
    bearer,
    computing_unit,
    create_request,
    reason,
    refused,
    register_unit,
    user,
)
from tests.integration.metrics_scrape import scrape
from tests.integration.test_cleanup import cleaned_up
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    usage_pb2,
    warehouse_pb2,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)
from warehouse_service.domain.usage_figures import Usage
from warehouse_service.store import usage_repository
from warehouse_service.store.db import Database

pytestmark = pytest.mark.integration

EX = execution_pb2
#: How long the registry may take to read an ended execution's usage (it looks every second).
READING_SECONDS = 60


@dataclass
class Lake:
    stack: Stack
    owner: str
    warehouse_id: str
    warehouses: warehouse_service_pb2_grpc.WarehouseServiceStub
    catalog: RestCatalog
    #: Executions run in the warehouse, and their result tables.
    executions: dict[str, list[str]]

    def as_user(self, user_id: str) -> tuple[tuple[str, str], ...]:
        return bearer(self.stack.token(user_id))

    def warehouse_usage(self, user_id: str = "") -> usage_pb2.WarehouseUsage:
        answer = self.warehouses.GetWarehouseUsage(
            usage_pb2.GetWarehouseUsageRequest(warehouse_id=self.warehouse_id),
            metadata=self.as_user(user_id or self.owner),
            timeout=60,
        )
        return answer.warehouse_usage

    def execution_usage(self, execution_id: str, user_id: str = "") -> usage_pb2.ExecutionUsage:
        answer = self.warehouses.GetExecutionUsage(
            usage_pb2.GetExecutionUsageRequest(execution_id=execution_id),
            metadata=self.as_user(user_id or self.owner),
            timeout=60,
        )
        return answer.execution_usage

    def settled(self) -> usage_pb2.WarehouseUsage:
        """The warehouse's usage once every ended execution's reading is done."""
        deadline = time.monotonic() + READING_SECONDS
        while True:
            usage = self.warehouse_usage()
            if usage.executions == len(self.executions) and not usage.executions_pending:
                return usage
            assert time.monotonic() < deadline, f"usage never settled: {usage}"
            time.sleep(0.3)


def run(stack: Stack, owner: str, warehouse_id: str, end: int) -> execution_pb2.Execution:
    client = unit_as(stack, owner)
    submitted = client.submit(warehouse_id, filtered_numbers(end, 3, "id % 3 = 0"))
    finished = client.finish(submitted.execution_id)
    assert finished.state == EX.EXECUTION_STATE_SUCCEEDED, finished.error
    return finished


def new_lake(stack: Stack, name: str, ends: tuple[int, ...]) -> Lake:
    """A new user's warehouse through the gateway, with one execution per end (rows 0..end-1,
    a third of them kept)."""
    owner = f"{name}-{uuid.uuid4().hex[:6]}"
    warehouses = warehouse_service_pb2_grpc.WarehouseServiceStub(
        stack.channel("gateway", presenting=None)
    )
    created = warehouses.CreateWarehouse(
        create_request(stack.provision_bucket(name), name=name),
        metadata=bearer(stack.token(owner)),
        timeout=120,
    ).warehouse
    executions = {}
    for end in ends:
        finished = run(stack, owner, created.warehouse_id, end)
        executions[finished.execution_id] = [o.table_name for o in finished.outputs]
    catalog = rest_catalog(stack, f"texera-{created.warehouse_id}")
    return Lake(stack, owner, created.warehouse_id, warehouses, catalog, executions)


@pytest.fixture(scope="module")
def lake(stack: Stack) -> Lake:
    return new_lake(stack, "usage", (3000, 600))


def pyiceberg_usage(catalog: RestCatalog, execution_id: str, result_tables: list[str]) -> Usage:
    """What the execution's tables hold by pyiceberg's reading of their manifests."""
    telemetry = execution_table(execution_id)
    identifiers = [(RESULTS, name) for name in result_tables]
    identifiers += [(RUNTIME_STATS, telemetry), (CONSOLE_LOGS, telemetry)]
    total = Usage()
    for identifier in identifiers:
        if not catalog.table_exists(identifier):  # an execution that never wrote telemetry
            continue
        table = catalog.load_table(identifier)
        files = table.inspect.files()
        data = files.filter(pc.equal(files["content"], 0))
        total += Usage(
            bytes=pc.sum(files["file_size_in_bytes"]).as_py() or 0,
            data_files=data.num_rows,
            rows=pc.sum(data["record_count"]).as_py() or 0,
            snapshots=len(table.metadata.snapshots),
            tables=1,
        )
    return total


def figures(usage: usage_pb2.StorageUsage) -> Usage:
    return Usage(usage.bytes, usage.data_files, usage.rows, usage.snapshots, usage.tables)


def check_against_pyiceberg(lake: Lake) -> Usage:
    """Every execution's usage and the warehouse's sum equal pyiceberg's reading."""
    summed = Usage()
    for execution_id, result_tables in lake.executions.items():
        expected = pyiceberg_usage(lake.catalog, execution_id, result_tables)
        shown = lake.execution_usage(execution_id)
        assert not shown.measurement_pending
        assert shown.warehouse_id == lake.warehouse_id
        assert figures(shown.usage) == expected, execution_id
        summed += expected
    assert figures(lake.settled().usage) == summed
    return summed


def test_usage_equals_pyiceberg_reading_the_same_tables(lake: Lake) -> None:
    lake.settled()
    summed = check_against_pyiceberg(lake)
    # Three tables an execution: its result, its statistics and its console messages.
    assert summed.tables == 3 * len(lake.executions)
    assert summed.rows >= 1000 + 200  # the result rows alone
    assert summed.bytes > 0
    assert summed.data_files >= 6


def test_usage_follows_rows_appended_and_deleted_once_read_again(lake: Lake) -> None:
    execution_id = next(iter(lake.executions))
    table = lake.catalog.load_table((RESULTS, lake.executions[execution_id][0]))
    before = lake.execution_usage(execution_id)
    table.append(table.scan(limit=50).to_arrow())
    table.delete("id < 900")  # rewrites the files that hold them
    # Whatever changes an ended execution's tables asks for a new reading (as retention does).
    schedule(lake.stack, execution_id)
    deadline = time.monotonic() + READING_SECONDS
    while (now := lake.execution_usage(execution_id)).measurement_pending or (
        now.measure_time.ToDatetime() <= before.measure_time.ToDatetime()
    ):
        assert time.monotonic() < deadline, "the new reading never came"
        time.sleep(0.3)
    assert now.usage.snapshots >= before.usage.snapshots + 2  # the append's, the delete's
    assert now.usage.rows != before.usage.rows
    check_against_pyiceberg(lake)


def schedule(stack: Stack, execution_id: str) -> None:
    async def due() -> None:
        db = Database(stack.database_url, 1)
        await db.open()
        try:
            async with db.connection() as connection:
                await usage_repository.schedule(connection, execution_id)
        finally:
            await db.close()

    asyncio.run(due())


def gauges(lake: Lake) -> dict[str, float]:
    """The registry's usage gauges of the warehouse, by figure, as Prometheus scrapes them."""
    label = f'{{warehouse_id="{lake.warehouse_id}"}}'
    text = scrape(lake.stack, "warehouse-service")
    return {
        line.split("{")[0].removeprefix("texera_lake_warehouse_"): float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("texera_lake_warehouse_") and label in line
    }


def eventually_shown(lake: Lake, expected: dict[str, float]) -> None:
    deadline = time.monotonic() + READING_SECONDS
    while (shown := gauges(lake)) != expected:
        assert time.monotonic() < deadline, (shown, expected)
        time.sleep(0.5)


def test_the_registry_publishes_each_warehouses_sums_as_gauges(lake: Lake) -> None:
    summed = lake.settled()
    expected = {
        "bytes": summed.usage.bytes,
        "data_files": summed.usage.data_files,
        "rows": summed.usage.rows,
        "snapshots": summed.usage.snapshots,
        "tables": summed.usage.tables,
        "executions": summed.executions,
    }
    eventually_shown(lake, {figure: float(value) for figure, value in expected.items()})


def test_the_command_line_shows_the_same_figures(
    lake: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    summed = lake.settled()
    execution_id = next(iter(lake.executions))
    one = lake.execution_usage(execution_id)
    monkeypatch.setenv("TEXERA_LAKE_TOKEN", lake.stack.token(lake.owner))
    tls = lake.stack.tls
    transport = ["--ca-file", str(tls.ca_file)] if tls else ["--plaintext"]
    target = ["--target", lake.stack.target("gateway"), *transport, "usage"]
    cli([*target, lake.warehouse_id])
    cli([*target, "--execution", execution_id])
    warehouse_lines, execution_lines = (
        {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in text.splitlines()[2:]}
        for text in capsys.readouterr().out.split("figure", 2)[1:]
    )
    assert warehouse_lines["bytes"].startswith(f"{summed.usage.bytes} (")
    assert warehouse_lines["rows"] == str(summed.usage.rows)
    assert warehouse_lines["executions"] == str(summed.executions)
    assert execution_lines["data files"] == str(one.usage.data_files)
    assert execution_lines["pending"] == "no"


def test_members_read_usage_and_strangers_learn_nothing(lake: Lake) -> None:
    reader, stranger = f"reader-{uuid.uuid4().hex[:6]}", f"stranger-{uuid.uuid4().hex[:6]}"
    lake.warehouses.ShareWarehouse(
        warehouse_service_pb2.ShareWarehouseRequest(
            warehouse_id=lake.warehouse_id,
            member=warehouse_pb2.WarehouseMember(
                user_id=reader, role=warehouse_pb2.WAREHOUSE_ROLE_READER
            ),
        ),
        metadata=lake.as_user(lake.owner),
        timeout=60,
    )
    execution_id = next(iter(lake.executions))
    assert lake.warehouse_usage(reader).usage == lake.warehouse_usage().usage
    assert lake.execution_usage(execution_id, reader) == lake.execution_usage(execution_id)

    error = refused(lambda: lake.warehouse_usage(stranger))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert reason(error) == "WAREHOUSE_NOT_FOUND"
    error = refused(lambda: lake.execution_usage(execution_id, stranger))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert reason(error) == "EXECUTION_NOT_FOUND"


@pytest.mark.parametrize(
    ("method", "request_message", "field"),
    [
        (
            "GetWarehouseUsage",
            usage_pb2.GetWarehouseUsageRequest(warehouse_id="nope"),
            "warehouse_id",
        ),
        ("GetWarehouseUsage", usage_pb2.GetWarehouseUsageRequest(), "warehouse_id"),
        (
            "GetExecutionUsage",
            usage_pb2.GetExecutionUsageRequest(execution_id="no/pe"),
            "execution_id",
        ),
        ("GetExecutionUsage", usage_pb2.GetExecutionUsageRequest(), "execution_id"),
    ],
)
def test_invalid_ids_are_refused_naming_the_field(
    lake: Lake, method: str, request_message: object, field: str
) -> None:
    call = getattr(lake.warehouses, method)
    error = refused(lambda: call(request_message, metadata=lake.as_user(lake.owner), timeout=60))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {field}


def bound(lake: Lake, prefix: str) -> tuple[RegistryClient, str]:
    """A unit of the owner's, recorded and registered without a process, and an execution it
    bound into the warehouse for the owner, as units do."""
    stack = lake.stack
    unit = computing_unit(stack, register_unit(stack, owner=lake.owner))
    execution_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    acting = unit.for_user(user(stack, lake.owner))
    acting.call(
        acting.ledger.BindExecution,
        registry_service_pb2.BindExecutionRequest(
            execution_id=execution_id,
            warehouse_id=lake.warehouse_id,
            computing_unit_id=unit.subject,
        ),
    )
    return unit, execution_id


def report(unit: RegistryClient, execution_id: str, state: int, **fields: object) -> None:
    request = registry_service_pb2.UpdateExecutionStateRequest(
        execution_id=execution_id,
        computing_unit_id=unit.subject,
        state=state,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )
    unit.call(unit.ledger.UpdateExecutionState, request)


def test_a_unit_cannot_count_another_executions_table_as_its_own(lake: Lake) -> None:
    """A unit reports an output naming a table of another execution in the same warehouse:
    the registry counts only tables whose properties name the execution."""
    unit, execution_id = bound(lake, "claims")
    report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)
    victim, tables = next(iter(lake.executions.items()))
    report(
        unit,
        execution_id,
        EX.EXECUTION_STATE_SUCCEEDED,
        outputs=[
            EX.ExecutionOutput(
                operator_id="kept", namespace=RESULTS, table_name=tables[0], row_count=1
            )
        ],
    )
    lake.executions[execution_id] = []
    lake.settled()
    shown = lake.execution_usage(execution_id)
    assert figures(shown.usage) == Usage(), "nothing of its own: the claimed table is not its"
    assert figures(lake.execution_usage(victim).usage).tables == 3


def test_a_failed_execution_counts_its_statistics_and_console_messages_only(lake: Lake) -> None:
    client = unit_as(lake.stack, lake.owner)
    failing = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 10, "partitions": 1}},
            {
                "operator_id": "broken",
                "input_operator_ids": ["n"],
                "python_udf": udf(
                    "def process(batches):\n    raise ValueError('broken on purpose')\n",
                    [("id", "bigint")],
                ),
                "materialize": True,
            },
        ]
    )
    submitted = client.submit(lake.warehouse_id, failing)
    finished = client.finish(submitted.execution_id)
    assert finished.state == EX.EXECUTION_STATE_FAILED, finished
    lake.executions[finished.execution_id] = []
    # Its results are dropped by the cleanup, after which its figures are read again.
    cleaned_up(user(lake.stack, lake.owner), finished.execution_id)
    lake.settled()
    check_against_pyiceberg(lake)
    assert lake.execution_usage(finished.execution_id).usage.tables == 2


def test_an_unfinished_execution_is_pending_and_counts_nothing_yet(lake: Lake) -> None:
    _, execution_id = bound(lake, "running")
    shown = lake.execution_usage(execution_id)
    assert shown.measurement_pending
    assert not shown.HasField("measure_time")
    assert figures(shown.usage) == Usage()


def test_a_deleted_warehouse_stores_nothing_any_more(stack: Stack) -> None:
    lake = new_lake(stack, "deleting", (30,))
    assert lake.settled().usage.tables == 3
    lake.warehouses.DeleteWarehouse(
        warehouse_service_pb2.DeleteWarehouseRequest(warehouse_id=lake.warehouse_id, purge=True),
        metadata=lake.as_user(lake.owner),
        timeout=120,
    )
    deadline = time.monotonic() + READING_SECONDS
    while figures((after := lake.settled()).usage) != Usage():
        assert time.monotonic() < deadline, f"the deleted warehouse still counts {after}"
        time.sleep(0.3)
    assert after.executions == 1
    eventually_shown(lake, {})  # a deleted warehouse has no gauges


def test_a_deleted_execution_stores_nothing_and_the_sum_follows(stack: Stack) -> None:
    lake = new_lake(stack, "forgetting", (300, 60))
    lake.settled()
    deleted, kept = list(lake.executions)
    before = lake.execution_usage(deleted)
    assert figures(before.usage).tables == 3
    executions = execution_service_pb2_grpc.ExecutionServiceStub(
        stack.channel("gateway", presenting=None)
    )
    executions.DeleteExecution(
        execution_service_pb2.DeleteExecutionRequest(execution_id=deleted),
        metadata=lake.as_user(lake.owner),
        timeout=60,
    )
    # Once its tables are dropped, the registry reads the execution again: it holds nothing.
    deadline = time.monotonic() + READING_SECONDS
    while (now := lake.execution_usage(deleted)).measurement_pending or figures(
        now.usage
    ) != Usage():
        assert time.monotonic() < deadline, f"the deleted execution still counts {now}"
        time.sleep(0.3)
    remaining = pyiceberg_usage(lake.catalog, kept, lake.executions[kept])
    assert figures(lake.settled().usage) == remaining
