"""The computing unit: Spark executions written as Iceberg tables into each user's own bucket."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
import requests
from pyiceberg.types import DoubleType
from pyspark.sql import SparkSession

from cu_service.spark import start_spark
from cu_service.workflow.compiler import WorkflowCompiler
from cu_service.workflow.file_roots import EXAMPLES, FileRoots
from cu_service.workflow.udf import ConsoleParam
from embedded_stack.stack import Stack
from lake_tables.naming import result_table
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import management, rest_catalog
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    UnitClient,
    bucket_keys,
    filtered_numbers,
    new_user,
    slow_workflow,
    udf,
    unit_as,
    workflow,
)
from tests.integration.mesh import bad_fields, gateway_account, refused, user
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, execution_service_pb2, warehouse_service_pb2, workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings

pytestmark = pytest.mark.integration
EX = execution_pb2
ws = warehouse_service_pb2
es = execution_service_pb2

SALES = [
    [1, "west", "2024-01-05", "12.50", 3],
    [2, "east", "2024-01-06", "7.25", 1],
    [3, "west", "2024-02-11", "99.99", 7],
    [4, "north", None, "0.10", 2],
    [5, "east", "2024-03-01", "15.00", 5],
]


def sales_workflow(tag: str) -> workflow_pb2.Workflow:
    """Every operator kind but file and table sources, with three materialized outputs."""
    return workflow(
        [
            {
                "operator_id": "sales",
                "inline_source": {
                    "columns": [
                        {"name": "id", "data_type": "bigint", "not_null": True},
                        {"name": "region", "data_type": "string"},
                        {"name": "day", "data_type": "date"},
                        {"name": "amount", "data_type": "decimal(10,2)"},
                        {"name": "units", "data_type": "int"},
                    ],
                    "rows": SALES,
                },
            },
            {
                "operator_id": "numbers",
                "range_source": {"start": 0, "end": 20000, "partitions": 4, "column_name": "n"},
            },
            {
                "operator_id": "big",
                "input_operator_ids": ["sales"],
                "filter": {"condition": "amount > 5"},
            },
            {
                "operator_id": "totals",
                "input_operator_ids": ["big"],
                "aggregate": {
                    "group_by": ["region"],
                    "aggregations": [
                        {
                            "function": "AGGREGATE_FUNCTION_SUM",
                            "column": "amount",
                            "alias": "revenue",
                        },
                        {"function": "AGGREGATE_FUNCTION_COUNT", "alias": "orders"},
                    ],
                },
                "materialize": True,
            },
            {
                "operator_id": "joined",
                "input_operator_ids": ["sales", "numbers"],
                "join": {
                    "type": "JOIN_TYPE_INNER",
                    "keys": [{"left_column": "units", "right_column": "n"}],
                },
            },
            {
                "operator_id": "labelled",
                "input_operator_ids": ["joined"],
                "projection": {
                    "columns": [
                        {"expression": "id"},
                        {"expression": f"concat(region, '-{tag}')", "alias": "label"},
                        {"expression": "n * 2", "alias": "doubled"},
                    ]
                },
                "materialize": True,
            },
            {
                "operator_id": "squares",
                "input_operator_ids": ["numbers"],
                "python_udf": udf(
                    "import pyarrow.compute as pc\n"
                    "def process(batches):\n"
                    "    for batch in batches:\n"
                    "        yield batch.set_column(0, 'n', pc.multiply(batch.column(0), batch.column(0)))\n",
                    [("n", "bigint")],
                ),
            },
            {
                "operator_id": "sq",
                "input_operator_ids": ["squares"],
                "sql_query": {
                    "query": "SELECT n % 7 AS bucket, count(*) AS c FROM squares GROUP BY n % 7"
                },
                "materialize": True,
            },
        ],
        workflow_id=f"sales-{tag}",
    )


@pytest.fixture(scope="module")
def local_spark() -> Iterator[SparkSession]:
    """Spark in the test process, to compute what the unit should have written."""
    spark = start_spark(ComputingUnitSettings(spark_master="local[2]", spark_driver_memory="1g"))
    yield spark
    spark.stop()


def expected_rows(
    spark: SparkSession, flow: workflow_pb2.Workflow
) -> dict[str, list[dict[str, Any]]]:
    console = spark.sparkContext.accumulator([], ConsoleParam())
    compiled = WorkflowCompiler(
        spark.newSession(),
        console,
        lambda i, op: None,  # type: ignore[arg-type,return-value]
        FileRoots.from_setting(""),
    ).compile(flow)
    return {op: _sorted(compiled.frames[op].toArrow()) for op in compiled.materialized}


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: [str(v) for v in row.values()])


def test_concurrent_executions_land_in_their_own_buckets_exactly_as_spark_computes(
    stack: Stack, local_spark: SparkSession
) -> None:
    alice, alice_warehouse, alice_grant = new_user(stack, "alice")
    bob, bob_warehouse, bob_grant = new_user(stack, "bob")
    flows = {"alice": sales_workflow("alice"), "bob": sales_workflow("bob")}
    submitted: dict[str, execution_pb2.Execution] = {}

    def run(name: str, client: UnitClient, warehouse_id: str) -> None:
        submitted[name] = client.submit(warehouse_id, flows[name])

    threads = [
        threading.Thread(target=run, args=("alice", alice, alice_warehouse)),
        threading.Thread(target=run, args=("bob", bob, bob_warehouse)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = {
        "alice": alice.finish(submitted["alice"].execution_id),
        "bob": bob.finish(submitted["bob"].execution_id),
    }
    for name, execution in finished.items():
        assert state_name(execution) == "SUCCEEDED", (name, execution.error)
        assert sorted(o.operator_id for o in execution.outputs) == ["labelled", "sq", "totals"]

    for name, grant, other_grant in (
        ("alice", alice_grant, bob_grant),
        ("bob", bob_grant, alice_grant),
    ):
        execution_id = finished[name].execution_id
        own = bucket_keys(stack, grant.bucket)
        assert any(execution_id.replace("-", "_") in key for key in own)
        assert not any(
            execution_id.replace("-", "_") in key or execution_id in key
            for key in bucket_keys(stack, other_grant.bucket)
        )

    expected = {name: expected_rows(local_spark, flow) for name, flow in flows.items()}
    for name, (client_warehouse, execution) in {
        "alice": (alice_warehouse, finished["alice"]),
        "bob": (bob_warehouse, finished["bob"]),
    }.items():
        catalog = rest_catalog(stack, f"texera-{client_warehouse}")
        for output in execution.outputs:
            table = catalog.load_table((output.namespace, output.table_name))
            assert output.table_name == result_table(execution.execution_id, output.operator_id)
            assert _sorted(table.scan().to_arrow()) == expected[name][output.operator_id]
            assert output.row_count == len(expected[name][output.operator_id])
            snapshot = table.current_snapshot()
            assert snapshot is not None
            assert snapshot.summary["texera.execution-id"] == execution.execution_id
            assert table.properties["texera.workflow-id"] == f"sales-{name}"


def test_watch_reports_progress_and_ends_with_the_final_state(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "watcher")
    flow = filtered_numbers(50_000, 6, "id % 3 = 0")
    execution = client.submit(warehouse_id, flow)
    assert state_name(execution) in ("QUEUED", "RUNNING")
    seen = client.watch(execution.execution_id)
    states = [state_name(e) for e in seen]
    assert states[-1] == "SUCCEEDED"
    assert "RUNNING" in states
    assert states.index("RUNNING") < len(states) - 1
    final = seen[-1]
    assert final.progress.rows_written == 16667
    assert final.progress.tasks_completed == final.progress.tasks_total > 0
    assert final.outputs[0].row_count == 16667
    assert final.HasField("start_time")
    assert final.HasField("end_time")
    assert client.get(execution.execution_id) == final


def test_a_udf_exception_fails_the_execution_and_keeps_its_traceback(stack: Stack) -> None:
    client, warehouse_id, grant = new_user(stack, "failing")
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 1000, "partitions": 2}},
            {
                "operator_id": "fine",
                "input_operator_ids": ["n"],
                "filter": {"condition": "id < 10"},
                "materialize": True,
            },
            {
                "operator_id": "broken",
                "input_operator_ids": ["n"],
                "python_udf": udf(
                    "def helper(x):\n"
                    "    return 1 / x\n"
                    "def process(batches):\n"
                    "    print('starting the broken udf')\n"
                    "    for batch in batches:\n"
                    "        helper(0)\n"
                    "        yield batch\n",
                    [("id", "bigint")],
                ),
                "materialize": True,
            },
        ]
    )
    execution = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "FAILED"
    assert execution.error.reason == "OPERATOR_FAILED"
    assert execution.error.operator_id == "broken"
    assert "ZeroDivisionError" in execution.error.message
    assert list(execution.outputs) == []

    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    assert (
        catalog.list_tables("results") == []
    )  # the output committed before the failure is gone too
    assert not [k for k in bucket_keys(stack, grant.bucket) if "/results/" in k and "/data/" in k]
    [console_table] = catalog.list_tables("console_logs")
    messages = catalog.load_table(console_table).scan().to_arrow().to_pylist()
    errors = [m for m in messages if m["level"] == "ERROR"]
    assert errors[0]["operator_id"] == "broken"
    assert "ZeroDivisionError" in errors[0]["message"]
    assert 'File "<udf broken>", line 2, in helper' in errors[0]["traceback"]
    assert any(m["message"] == "starting the broken udf" for m in messages)


def test_user_code_does_not_see_the_units_secrets(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "curious")
    looks = (
        "import os\n"
        "def process(batches):\n"
        "    found = sorted(k for k in os.environ if k.startswith('TEXERA_LAKE_'))\n"
        "    print('variables: ' + ','.join(found))\n"
        "    yield from batches\n"
    )
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 10, "partitions": 1}},
            {
                "operator_id": "curious",
                "input_operator_ids": ["n"],
                "python_udf": udf(looks, [("id", "bigint")]),
                "materialize": True,
            },
        ]
    )
    execution = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED"
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    [console_table] = catalog.list_tables("console_logs")
    messages = catalog.load_table(console_table).scan().to_arrow().to_pylist()
    [seen] = [m["message"] for m in messages if m["message"].startswith("variables: ")]
    assert "TEXERA_LAKE_CU_PORT" in seen  # what the unit was started with, but no secret
    assert "TEXERA_LAKE_JWT_SECRET" not in seen
    assert not [name for name in seen.split(",") if "CREDENTIAL" in name]


def test_executions_beyond_capacity_wait_in_order_and_can_be_cancelled_while_queued(
    stack: Stack,
) -> None:
    client, warehouse_id, _ = new_user(stack, "queue")
    first, second, third = (client.submit(warehouse_id, slow_workflow()) for _ in range(3))
    assert (
        state_name(client.wait_for_state(first.execution_id, EX.EXECUTION_STATE_RUNNING))
        == "RUNNING"
    )
    assert (
        state_name(client.wait_for_state(second.execution_id, EX.EXECUTION_STATE_RUNNING))
        == "RUNNING"
    )
    assert state_name(client.get(third.execution_id)) == "QUEUED"  # capacity is 2
    cancelled = client.cancel(third.execution_id)
    assert state_name(cancelled) == "CANCELLED"
    for execution in (first, second):
        client.cancel(execution.execution_id)
    for execution in (first, second, third):
        assert state_name(client.finish(execution.execution_id, timeout=60)) == "CANCELLED"


def test_a_later_execution_reads_an_earlier_result(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "reader")
    first = client.finish(
        client.submit(
            warehouse_id,
            workflow(
                [
                    {
                        "operator_id": "n",
                        "range_source": {"end": 300, "partitions": 3},
                        "materialize": True,
                    }
                ]
            ),
        ).execution_id
    )
    assert state_name(first) == "SUCCEEDED"
    second = client.finish(
        client.submit(
            warehouse_id,
            workflow(
                [
                    {
                        "operator_id": "earlier",
                        "iceberg_table_source": {
                            "result": {"execution_id": first.execution_id, "operator_id": "n"}
                        },
                    },
                    {
                        "operator_id": "total",
                        "input_operator_ids": ["earlier"],
                        "aggregate": {
                            "aggregations": [
                                {"function": "AGGREGATE_FUNCTION_SUM", "column": "id", "alias": "s"}
                            ]
                        },
                        "materialize": True,
                    },
                ]
            ),
        ).execution_id
    )
    assert state_name(second) == "SUCCEEDED", second.error
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    [output] = second.outputs
    assert catalog.load_table(
        (output.namespace, output.table_name)
    ).scan().to_arrow().to_pylist() == [{"s": sum(range(300))}]


def test_an_iceberg_source_reads_renamed_and_added_columns_and_not_deleted_rows(
    stack: Stack,
) -> None:
    """A table written with pyiceberg: a file from before a column was renamed and another was
    added, and a file rewritten by a delete; a workflow reads what pyiceberg reads."""
    client, warehouse_id, _ = new_user(stack, "evolved")
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    catalog.create_namespace_if_not_exists("shared")
    table = catalog.create_table(
        ("shared", "people"), schema=pa.schema([("id", pa.int64()), ("name", pa.string())])
    )
    table.append(pa.table({"id": [1, 2], "name": ["a", None]}))
    [before_rename] = [task.file.file_path for task in table.scan().plan_files()]
    with table.update_schema() as update:
        update.rename_column("name", "label")
        update.add_column("score", DoubleType())
    table.append(
        pa.table(
            {"id": [3, 4, 5], "label": ["c", "d", None], "score": [0.5, None, 1.5]},
            schema=table.schema().as_arrow(),
        )
    )
    table.delete("id = 4")  # pyiceberg rewrites the second file, leaving the first as it was
    assert before_rename in {task.file.file_path for task in table.scan().plan_files()}
    flow = workflow(
        [
            {
                "operator_id": "people",
                "iceberg_table_source": {
                    "table_identifier": {"namespace": ["shared"], "name": "people"}
                },
                "materialize": True,
            }
        ]
    )
    execution = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    [output] = execution.outputs
    read = catalog.load_table((output.namespace, output.table_name)).scan().to_arrow()
    assert read.schema.names == ["id", "label", "score"]
    assert sorted(read.to_pylist(), key=lambda row: row["id"]) == [
        {"id": 1, "label": "a", "score": None},
        {"id": 2, "label": None, "score": None},
        {"id": 3, "label": "c", "score": 0.5},
        {"id": 5, "label": None, "score": 1.5},
    ]


@pytest.mark.parametrize(
    ("operators", "field", "mentions"),
    [
        (
            [
                {"operator_id": "a", "range_source": {"end": 3}},
                {
                    "operator_id": "b",
                    "input_operator_ids": ["a"],
                    "filter": {"condition": "nope > 1"},
                    "materialize": True,
                },
            ],
            "workflow.operators[1].filter.condition",
            "'b'",
        ),
        (
            [
                {"operator_id": "a", "range_source": {"end": 3}},
                {
                    "operator_id": "b",
                    "input_operator_ids": ["a"],
                    "sql_query": {"query": "DROP TABLE a"},
                    "materialize": True,
                },
            ],
            "workflow.operators[1].sql_query.query",
            "'b'",
        ),
        (
            [
                {"operator_id": "a", "range_source": {"end": 3}},
                {
                    "operator_id": "b",
                    "input_operator_ids": ["a"],
                    "sql_query": {"query": "SELECT reflect('java.lang.System', 'getenv', 'PATH')"},
                    "materialize": True,
                },
            ],
            "workflow.operators[1].sql_query.query",
            "calls into the JVM",
        ),
        (
            [
                {
                    "operator_id": "f",
                    "file_source": {"format": "FILE_FORMAT_CSV", "path": "/etc/hostname"},
                    "materialize": True,
                }
            ],
            "workflow.operators[0].file_source.path",
            "file sources may read only under",
        ),
        (
            [
                {
                    "operator_id": "a",
                    "input_operator_ids": ["b"],
                    "filter": {"condition": "true"},
                    "materialize": True,
                },
                {"operator_id": "b", "input_operator_ids": ["a"], "filter": {"condition": "true"}},
            ],
            "workflow.operators[0].input_operator_ids",
            "cycle",
        ),
        (
            [
                {
                    "operator_id": "a",
                    "input_operator_ids": ["ghost"],
                    "filter": {"condition": "true"},
                    "materialize": True,
                }
            ],
            "workflow.operators[0].input_operator_ids[0]",
            "'ghost'",
        ),
        (
            [
                {
                    "operator_id": "a",
                    "python_udf": {"code": "def process(:\n", "output_columns": []},
                    "materialize": True,
                }
            ],
            "workflow.operators[0].python_udf.code",
            "syntax error",
        ),
    ],
    ids=[
        "unknown column",
        "not a query",
        "sql into the jvm",
        "file outside the roots",
        "cycle",
        "unknown input",
        "udf syntax",
    ],
)
def test_bad_workflows_are_refused_naming_the_operator(
    stack: Stack, operators: list[dict[str, Any]], field: str, mentions: str
) -> None:
    client, warehouse_id, _ = new_user(stack, "invalid")
    error = refused(lambda: client.submit(warehouse_id, workflow(operators)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in bad_fields(error)
    assert mentions in (error.details() or "")


def test_the_shipped_examples_are_readable_by_default(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "reader")
    flow = workflow(
        [
            {
                "operator_id": "orders",
                "file_source": {
                    "format": "FILE_FORMAT_CSV",
                    "path": str(EXAMPLES / "orders.csv"),
                    "csv_header": True,
                },
                "materialize": True,
            }
        ]
    )
    execution = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    assert execution.outputs[0].row_count == 3


@pytest.mark.parametrize(
    ("operator", "reason", "says"),
    [
        (
            {
                "projection": {
                    "columns": [
                        {
                            "expression": "date_add(DATE'9999-12-31', CAST(id AS INT) + 1)",
                            "alias": "day",
                        }
                    ]
                }
            },
            "OPERATOR_FAILED",
            "column 'day' holds a date after year 9999",
        ),
        (
            {
                "python_udf": udf(
                    "def process(batches):\n    yield from batches\n", [("other", "bigint")]
                )
            },
            "OPERATOR_FAILED",
            "ValueError: the function yielded columns ['id'], the output columns are ['other']",
        ),
        (
            {
                "python_udf": udf(
                    "import sys\ndef process(batches):\n    sys.exit(3)\n    yield\n",
                    [("id", "bigint")],
                )
            },
            "OPERATOR_FAILED",
            "SystemExit: 3",
        ),
        (
            {"projection": {"columns": [{"expression": "CAST(CAST(id AS STRING) || 'x' AS INT)"}]}},
            "EXECUTION_FAILED",
            "[CAST_INVALID_INPUT] The value '0x'",
        ),
    ],
    ids=["date past 9999", "udf output", "udf exits", "bad cast"],
)
def test_failures_at_run_time_name_the_operator_and_say_what(
    stack: Stack, operator: dict[str, Any], reason: str, says: str
) -> None:
    client, warehouse_id, _ = new_user(stack, "overflow")
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 3, "partitions": 1}},
            {"operator_id": "out", "input_operator_ids": ["n"], "materialize": True, **operator},
        ]
    )
    execution = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "FAILED"
    assert execution.error.reason == reason
    assert execution.error.operator_id == "out"
    assert says in execution.error.message
    assert "An exception was thrown from the Python worker" not in execution.error.message


EXECUTION_BAD_INPUT = [
    ("GetExecution", lambda c: c.get("no/such id"), {"execution_id"}),
    ("WatchExecution", lambda c: c.watch("x" * 65), {"execution_id"}),
    ("CancelExecution", lambda c: c.cancel("", reason="r" * 1001), {"execution_id", "reason"}),
    (
        "ListExecutions",
        lambda c: c.stub.ListExecutions(
            es.ListExecutionsRequest(page_size=-1), metadata=c.metadata, timeout=60
        ),
        {"page_size"},
    ),
]


@pytest.mark.parametrize(
    ("method", "call", "fields"), EXECUTION_BAD_INPUT, ids=[m for m, _, _ in EXECUTION_BAD_INPUT]
)
def test_bad_execution_requests_name_the_field(
    stack: Stack, method: str, call: Callable[[UnitClient], Any], fields: set[str]
) -> None:
    client = unit_as(stack, f"asker-{uuid.uuid4().hex[:6]}")
    error = refused(lambda: call(client))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == fields


def test_submission_is_idempotent_and_ids_are_not_reused(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "idem")
    flow = workflow([{"operator_id": "n", "range_source": {"end": 10}, "materialize": True}])
    execution_id = f"ex-{uuid.uuid4().hex[:10]}"
    first = client.submit(warehouse_id, flow, execution_id=execution_id)
    again = client.submit(warehouse_id, flow, execution_id=execution_id)
    assert again.execution_id == first.execution_id
    other = workflow([{"operator_id": "n", "range_source": {"end": 11}, "materialize": True}])
    assert refused(
        lambda: client.submit(warehouse_id, other, execution_id=execution_id)
    ).code() == (grpc.StatusCode.ALREADY_EXISTS)
    request_id = str(uuid.uuid4())
    by_request = client.submit(warehouse_id, flow, request_id=request_id)
    assert (
        client.submit(warehouse_id, flow, request_id=request_id).execution_id
        == by_request.execution_id
    )
    client.finish(first.execution_id)
    client.finish(by_request.execution_id)


def test_other_users_and_archived_warehouses_are_refused(stack: Stack) -> None:
    alice, alice_warehouse, _ = new_user(stack, "owner")
    mallory = unit_as(stack, f"mallory-{uuid.uuid4().hex[:6]}")
    flow = workflow([{"operator_id": "n", "range_source": {"end": 10}, "materialize": True}])
    assert (
        refused(lambda: mallory.submit(alice_warehouse, flow)).code() == grpc.StatusCode.NOT_FOUND
    )
    execution = alice.finish(alice.submit(alice_warehouse, flow).execution_id)
    for call in (
        lambda: mallory.get(execution.execution_id),
        lambda: mallory.cancel(execution.execution_id),
        lambda: mallory.watch(execution.execution_id),
    ):
        assert refused(call).code() == grpc.StatusCode.NOT_FOUND

    owner = user(stack, execution.owner_user_id)
    owner.call(
        owner.warehouses.ArchiveWarehouse, ws.ArchiveWarehouseRequest(warehouse_id=alice_warehouse)
    )
    archived = refused(lambda: alice.submit(alice_warehouse, flow))
    assert archived.code() == grpc.StatusCode.FAILED_PRECONDITION
    bad = refused(lambda: alice.submit("not-a-uuid", flow))
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(bad) == {"warehouse_id"}


def test_a_broken_warehouse_does_not_hold_up_another(stack: Stack) -> None:
    slow_client, slow_warehouse, _ = new_user(stack, "slowcat")
    fast_client, fast_warehouse, _ = new_user(stack, "fastcat")
    catalog_id = next(
        w["id"]
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == f"texera-{slow_warehouse}"
    )
    fault = f"{stack.catalog_url}/dev/v1/warehouse/{catalog_id}/fault"
    flow = workflow([{"operator_id": "n", "range_source": {"end": 1000}, "materialize": True}])
    order: list[str] = []

    def submit_slow() -> None:
        try:
            slow_client.finish(slow_client.submit(slow_warehouse, flow).execution_id)
        finally:
            order.append("slow")

    requests.put(fault, json={"delay-seconds": 10}, timeout=10).raise_for_status()
    try:
        worker = threading.Thread(target=submit_slow)
        worker.start()
        time.sleep(1)
        fast = fast_client.finish(fast_client.submit(fast_warehouse, flow).execution_id)
        order.append("fast")
        assert state_name(fast) == "SUCCEEDED"
        assert order == ["fast"]  # the slow warehouse's execution is still waiting on its catalog
    finally:
        requests.delete(fault, timeout=10)
    worker.join(120)
    assert order == ["fast", "slow"]

    # A failing catalog fails its own warehouse's executions, and nothing else.
    requests.put(fault, json={"fail-status": 503}, timeout=10).raise_for_status()
    try:
        failed = slow_client.finish(slow_client.submit(slow_warehouse, flow).execution_id)
        assert state_name(failed) == "FAILED"
        assert failed.error.reason == "CATALOG_UNAVAILABLE"
        succeeded = fast_client.finish(fast_client.submit(fast_warehouse, flow).execution_id)
        assert state_name(succeeded) == "SUCCEEDED"
    finally:
        requests.delete(fault, timeout=10)


def test_the_unit_is_registered_and_heartbeats(stack: Stack) -> None:
    running = stack.unit_for(SHARED_UNIT_OWNER)
    gateway = gateway_account(stack)

    def registration() -> registry_service_pb2.UnitRegistration:
        listed: registry_service_pb2.ListUnitRegistrationsResponse = gateway.call(
            gateway.leases.ListUnitRegistrations,
            registry_service_pb2.ListUnitRegistrationsRequest(healthy_only=True),
        )
        [unit] = [u for u in listed.registrations if u.computing_unit_id == running.unit_id]
        return unit

    unit = registration()
    assert unit.endpoint == running.target
    assert unit.capacity == 2
    first = unit.last_heartbeat_time.ToDatetime()
    time.sleep(2.5)
    assert registration().last_heartbeat_time.ToDatetime() > first


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [d for child in map(int, children) for d in (child, *_descendants(child))]


def test_the_units_jvm_runs_with_the_configured_java_options(stack: Stack) -> None:
    running = stack.unit_for(SHARED_UNIT_OWNER)
    command_lines = [
        Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in _descendants(running.pid)
    ]
    [jvm] = [line for line in command_lines if line[0].endswith(b"java")]
    configured = TEST_STACK_ENV["TEXERA_LAKE_CU_SPARK_DRIVER_JAVA_OPTIONS"].encode()
    assert configured in jvm
