"""Every type a workflow can produce, with nulls at every depth and the edges of each type,
written by the computing unit and read back through pages, streams and pyiceberg, and through a
later workflow's iceberg_table_source: all equal to the input. An output with no rows is a
result with no rows, with its whole schema."""

from __future__ import annotations

import base64
import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import UnitClient, new_user, udf, workflow
from tests.integration.results import ResultClient, arrow_table, results_like
from texera.lake.v1 import execution_pb2

pytestmark = pytest.mark.integration

#: (name, Spark SQL type) of every column; "id" orders the rows.
COLUMNS = [
    ("id", "int"),
    ("flag", "boolean"),
    ("tiny", "tinyint"),
    ("small", "smallint"),
    ("whole", "int"),
    ("big", "bigint"),
    ("single", "float"),
    ("real", "double"),
    ("wide", "decimal(38,0)"),
    ("fine", "decimal(38,18)"),
    ("text", "string"),
    ("blob", "binary"),
    ("day", "date"),
    ("at_utc", "timestamp"),
    ("at_local", "timestamp_ntz"),
    ("words", "array<string>"),
    ("grid", "array<array<int>>"),
    ("points", "array<struct<x:int,label:string>>"),
    ("counts", "map<string,int>"),
    ("shapes", "map<string,struct<area:double,sides:array<int>>>"),
    ("names", "map<int,string>"),
    ("nest", "struct<inner:struct<v:int>,items:array<string>,tags:map<string,string>>"),
]
NAMES = [name for name, _ in COLUMNS]
#: Built from text: arithmetic on a Decimal rounds it to Python's default 28 digits.
BIGGEST, LEAST = Decimal("9" * 38), Decimal("-" + "9" * 38)
FINEST = "9" * 20 + "." + "9" * 18
FINEST_UP, FINEST_DOWN = Decimal(FINEST), Decimal("-" + FINEST)

#: The rows, as Python values (the truth both the input and the reads are held to).
ROWS: list[list[Any]] = [
    [
        0,
        True,
        127,
        32767,
        2147483647,
        2**63 - 1,
        1.5,
        math.nan,
        BIGGEST,
        Decimal("0.000000000000000001"),
        "héllo ✓",
        b"\x00\xffbin",
        date(2024, 2, 29),
        datetime(2024, 3, 1, 10, 30, 0, 123456, tzinfo=UTC),
        datetime(2024, 3, 1, 12, 30, 0, 500000),
        ["a", "b"],
        [[1, 2], [3]],
        [{"x": 7, "label": "seven"}],
        {"k": 1},
        {"square": {"area": 4.0, "sides": [2, 2, 2, 2]}},
        {1: "one"},
        {"inner": {"v": 5}, "items": ["i"], "tags": {"t": "u"}},
    ],
    [  # the edges: smallest values, empty strings and empty containers (not nulls)
        1,
        False,
        -128,
        -32768,
        -2147483648,
        -(2**63),
        -math.inf,
        math.inf,
        LEAST,
        FINEST_DOWN,
        "",
        b"",
        date(1, 1, 1),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1),
        [],
        [[]],
        [],
        {},
        {},
        {},
        {"inner": {"v": None}, "items": [], "tags": {}},
    ],
    [  # the largest values, and nulls one level down in every nested column
        2,
        None,
        0,
        0,
        0,
        2**53 + 1,
        math.inf,
        -math.inf,
        BIGGEST,
        FINEST_UP,
        "  ",
        b"\x00",
        date(9999, 12, 31),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        [None, ""],
        [None, [None, 1], []],
        [None, {"x": None, "label": None}],
        {"k": None},
        {"gone": None, "open": {"area": math.nan, "sides": None}},
        {2: None},
        {"inner": None, "items": None, "tags": None},
    ],
    [  # nulls two levels down
        3,
        None,
        None,
        None,
        None,
        None,
        math.nan,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        [[None]],
        [{"x": 1, "label": None}],
        None,
        {"s": {"area": None, "sides": [None]}},
        None,
        {"inner": {"v": None}, "items": [None], "tags": {"t": None}},
    ],
    [4, *[None] * (len(COLUMNS) - 1)],  # null in every column
]


def _json(value: Any) -> Any:
    """A Python value as the inline source takes it and ReadResultPage gives it back (the
    type mapping in docs/results.md): exact, so longs beyond 2^53 and decimals are strings."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 - 1 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return "Infinity" if value == math.inf else "-Infinity" if value == -math.inf else value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        text = value.replace(tzinfo=None).isoformat(timespec="microseconds")
        return text + "Z" if value.tzinfo else text
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return [_json(item) for item in value]
    return {str(key): _json(item) for key, item in value.items()}


def _read_json(row: list[Any]) -> dict[str, Any]:
    """The JSON object ReadResultPage gives for a row: maps with other than string keys are
    lists of key/value pairs."""
    shown = {name: _json(value) for name, value in zip(NAMES, row, strict=True)}
    names = row[NAMES.index("names")]
    if names is not None:
        shown["names"] = [{"key": k, "value": v} for k, v in names.items()]
    return shown


def _same(value: Any) -> Any:
    """A value in a form that compares equal when the values are equal (NaN equals NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {key: _same(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_same(item) for item in value]
    return value


def _from_arrow(value: Any, kind: pa.DataType) -> Any:
    """A value Arrow read, as _same gives the value written (maps are lists of pairs in
    Arrow's Python values)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return {key: _from_arrow(item, kind.item_type) for key, item in value}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_from_arrow(item, kind.value_type) for item in value]
    if pa.types.is_struct(kind):
        return {field.name: _from_arrow(value[field.name], field.type) for field in kind}
    return _same(value)


def _arrow_rows(table: pa.Table) -> list[list[Any]]:
    kinds = {field.name: field.type for field in table.schema}
    rows = sorted(table.to_pylist(), key=lambda row: row["id"])
    return [[_from_arrow(row[name], kinds[name]) for name in NAMES] for row in rows]


def _stored(table: Table) -> pa.Table:
    """The rows of the table's data files, found and opened through pyiceberg and read with
    pyarrow: what any reader gets. (pyiceberg 0.12's own scan turns a null list or map of
    structs into an empty one as it reads, apache/iceberg-python#3833.)"""
    read = []
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            read.append(pq.read_table(stream))
    return pa.concat_tables(read)


EXPECTED = [[_same(value) for value in row] for row in ROWS]
SPEC = [{"name": name, "data_type": kind} for name, kind in COLUMNS]
#: Materialized outputs that carry every row, each written along another path.
CARRIERS = ("typed", "via_sql", "via_udf")


class Written(NamedTuple):
    """The execution that wrote every row, and how to reach its results."""

    execution: execution_pb2.Execution
    results: ResultClient
    warehouse_id: str
    unit: UnitClient


@pytest.fixture(scope="module")
def written(stack: Stack) -> Written:
    unit, warehouse_id, _ = new_user(stack, "exact")
    flow = workflow(
        [
            {
                "operator_id": "typed",
                "inline_source": {"columns": SPEC, "rows": [[_json(v) for v in r] for r in ROWS]},
                "materialize": True,
            },
            {
                "operator_id": "via_sql",
                "input_operator_ids": ["typed"],
                "sql_query": {"query": "SELECT * FROM typed"},
                "materialize": True,
            },
            {
                "operator_id": "via_udf",
                "input_operator_ids": ["typed"],
                "python_udf": udf("def process(batches):\n    yield from batches\n", COLUMNS),
                "materialize": True,
            },
            {
                "operator_id": "empty",
                "input_operator_ids": ["typed"],
                "filter": {"condition": "false"},
                "materialize": True,
            },
        ]
    )
    execution = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    return Written(execution, results_like(stack, unit), warehouse_id, unit)


def _assert_every_value_reads_back(
    stack: Stack, written: Written, execution: execution_pb2.Execution, operator_id: str
) -> None:
    """The result of operator_id holds ROWS, through pages, streams and its data files."""
    rows, _ = written.results.all_rows(execution.execution_id, operator_id, page_size=2)
    assert sorted(rows, key=lambda row: row["id"]) == [_read_json(row) for row in ROWS]

    streamed = arrow_table(written.results.stream(execution.execution_id, operator_id))
    assert _arrow_rows(streamed) == EXPECTED

    [output] = [o for o in execution.outputs if o.operator_id == operator_id]
    catalog = rest_catalog(stack, f"texera-{written.warehouse_id}")
    table = catalog.load_table((output.namespace, output.table_name))
    assert _arrow_rows(_stored(table)) == EXPECTED
    assert output.row_count == len(ROWS)


@pytest.mark.parametrize("operator_id", CARRIERS)
def test_every_value_reads_back_as_written_through_pages_streams_and_pyiceberg(
    stack: Stack, written: Written, operator_id: str
) -> None:
    _assert_every_value_reads_back(stack, written, written.execution, operator_id)


def test_every_value_reads_back_through_a_later_iceberg_table_source(
    stack: Stack, written: Written
) -> None:
    """A later execution reads a result as an Iceberg table, by data file on Spark's
    executors, and materializes what it read: nulls of lists and maps of structs stay nulls."""
    earlier = {"execution_id": written.execution.execution_id, "operator_id": "typed"}
    flow = workflow(
        [
            {
                "operator_id": "reread",
                "iceberg_table_source": {"result": earlier},
                "materialize": True,
            }
        ]
    )
    execution = written.unit.finish(written.unit.submit(written.warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    _assert_every_value_reads_back(stack, written, execution, "reread")


def test_a_result_with_no_rows_keeps_its_schema_everywhere(stack: Stack, written: Written) -> None:
    execution, results, warehouse_id, _ = written
    execution_id = execution.execution_id
    empty = next(o for o in execution.outputs if o.operator_id == "empty")
    assert (empty.row_count, empty.file_count) == (0, 0)

    listed = {r.operator_id: r for r in results.list_results(execution_id).results}
    assert set(listed) == {*CARRIERS, "empty"}
    full_columns = list(listed["typed"].columns)
    assert [c.name for c in full_columns] == NAMES
    assert listed["empty"].row_count == 0
    assert list(listed["empty"].columns) == full_columns
    assert list(results.get(execution_id, "empty").columns) == full_columns

    page = results.page(execution_id, "empty")
    assert (list(page.rows), page.next_page_token) == ([], "")
    assert list(page.columns) == full_columns

    schema = arrow_table(results.stream(execution_id, "typed", limit=1)).schema
    streamed = arrow_table(results.stream(execution_id, "empty"))
    assert streamed.num_rows == 0
    assert streamed.schema == schema
    projected = arrow_table(results.stream(execution_id, "empty", columns=["nest", "id"]))
    assert projected.schema.names == ["nest", "id"]

    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    table = catalog.load_table((empty.namespace, empty.table_name))
    assert [field.name for field in table.schema().fields] == NAMES
    assert list(table.scan().plan_files()) == []
    assert table.scan().to_arrow().num_rows == 0
