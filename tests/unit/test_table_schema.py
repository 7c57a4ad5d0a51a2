"""A result table's schema says what its data holds: a field Spark declares non-nullable inside a
struct that may be null is optional in the table (a null struct's fields are null in the Arrow
batches Spark hands the writer), at any depth; what no null struct reaches keeps Spark's
declaration. Rows with null structs, as Spark writes them, are then written and read back
exactly."""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from cu_service.spark import arrow_schema
from cu_service.table_access import TableAccess
from cu_service.workflow.udf import OperatorFailure
from cu_service.writer.files import WriteSpec, write_partition
from cu_service.writer.table_schema import table_schema

#: named_struct('b', CAST(id AS STRING)): Spark says b is never null in a struct that is there.
B = StructType([StructField("b", StringType(), nullable=False)])

#: Columns where a struct that may be null holds a field Spark declares non-nullable.
UNDER_NULL_STRUCTS = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("s", B, nullable=True),
        StructField("a", ArrayType(B, containsNull=True), nullable=False),
        StructField("m", MapType(StringType(), B, valueContainsNull=True), nullable=False),
        StructField("d", StructType([StructField("t", B, nullable=False)]), nullable=True),
    ]
)

#: Columns where no null struct reaches a field Spark declares non-nullable.
NO_NULL_STRUCT = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("r", B, nullable=False),
        StructField("e", ArrayType(B, containsNull=False), nullable=True),
        StructField("n", ArrayType(StringType(), containsNull=False), nullable=True),
        StructField("k", MapType(StringType(), B, valueContainsNull=False), nullable=True),
    ]
)


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    made = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    made.create_namespace("results")
    return made


def _required(table: Table, paths: Iterable[str]) -> dict[str, bool]:
    """Whether each field of the table's Iceberg schema, by dotted path, is required."""
    schema = table.schema()
    return {path: schema.find_field(path).required for path in paths}


def test_a_field_under_a_struct_that_may_be_null_is_optional_at_every_depth(
    catalog: SqlCatalog,
) -> None:
    table = catalog.create_table("results.t", schema=table_schema(UNDER_NULL_STRUCTS))
    expected = {
        "id": True,  # a top-level column Spark declares non-nullable never holds a null
        "s": False,
        "s.b": False,  # nested struct
        "a": True,
        "a.element": False,
        "a.element.b": False,  # array of struct
        "m": True,
        "m.key": True,
        "m.value": False,
        "m.value.b": False,  # map
        "d": False,
        "d.t": False,  # two levels deep
        "d.t.b": False,
    }
    assert _required(table, expected) == expected


def test_fields_no_null_struct_reaches_keep_what_spark_declares(catalog: SqlCatalog) -> None:
    """A null list or map has no elements: their nullability reaches no field inside."""
    table = catalog.create_table("results.t", schema=table_schema(NO_NULL_STRUCT))
    expected = {
        "id": True,
        "r": True,
        "r.b": True,
        "e": False,
        "e.element": True,
        "e.element.b": True,
        "n": False,
        "n.element": True,
        "k": False,
        "k.key": True,
        "k.value": True,
        "k.value.b": True,
    }
    assert _required(table, expected) == expected


def test_flat_columns_keep_what_spark_declares() -> None:
    flat = StructType(
        [StructField("id", LongType(), nullable=False), StructField("x", StringType(), True)]
    )
    assert table_schema(flat) == arrow_schema(flat)


def _b_structs(ids: list[int | None]) -> pa.StructArray:
    """named_struct('b', CAST(id AS STRING)) for each id, None for a null struct, as Spark hands
    them to the writer: a null struct's b holds a null, though b is declared non-nullable."""
    [declared] = arrow_schema(StructType([StructField("x", B)])).field("x").type
    return pa.StructArray.from_arrays(
        [pa.array([None if i is None else str(i) for i in ids], pa.string())],
        fields=[declared],
        mask=pa.array([i is None for i in ids]),
    )


def _spark_batch() -> pa.RecordBatch:
    """Rows 0, 1, 2 of UNDER_NULL_STRUCTS with Spark's own Arrow schema: in row 0 every struct
    is null (one list element, one map value)."""
    declared = arrow_schema(UNDER_NULL_STRUCTS)
    structs = _b_structs([None, 1, 2])
    one_each = pa.array([0, 1, 2, 3], pa.int32())
    d = pa.StructArray.from_arrays(
        [structs], fields=list(declared.field("d").type), mask=pa.array([True, False, False])
    )
    columns = [
        pa.array([0, 1, 2], pa.int64()),
        structs,
        pa.ListArray.from_arrays(one_each, structs, type=declared.field("a").type),
        pa.MapArray.from_arrays(
            one_each, pa.array(["k"] * 3), structs, type=declared.field("m").type
        ),
        d,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=declared)


def _b(i: int) -> dict[str, str]:
    return {"b": str(i)}


EXPECTED = [
    {"id": 0, "s": None, "a": [None], "m": [("k", None)], "d": None},
    *({"id": i, "s": _b(i), "a": [_b(i)], "m": [("k", _b(i))], "d": {"t": _b(i)}} for i in (1, 2)),
]


def _write(table: Table, tmp_path: Path, batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """What write_partition, the writer's Spark task, writes of batch into table's files."""
    spec = WriteSpec(
        access=TableAccess(table.metadata.model_dump_json(), {}),
        operator_id="shaped",
        data_location=f"file://{tmp_path}/data",
        target_file_size=1 << 30,
        max_bytes=1 << 30,
    )
    return [pickle.loads(b.column(0)[0].as_py()) for b in write_partition(spec, iter([batch]))]


def test_rows_with_null_structs_are_written_and_read_back_exactly(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = catalog.create_table("results.t", schema=table_schema(UNDER_NULL_STRUCTS))
    [written] = _write(table, tmp_path, _spark_batch())
    assert int(written["record_count"]) == len(EXPECTED)
    assert pq.read_table(written["file_path"].removeprefix("file://")).to_pylist() == EXPECTED


def test_a_table_with_spark_declared_nested_nullability_refuses_those_rows(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Why table_schema exists: written as Spark declares them, the same rows fail."""
    table = catalog.create_table("results.t", schema=arrow_schema(UNDER_NULL_STRUCTS))
    with pytest.raises(OperatorFailure, match=r"ArrowInvalid: .*non-nullable"):
        _write(table, tmp_path, _spark_batch())
