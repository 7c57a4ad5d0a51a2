"""Reading one planned scan task of an Iceberg table from local files: positional deletes
dropped, columns matched by field id or through the name mapping, every null kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.typedef import Record
from pyiceberg.types import (
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from lake_tables.scan_tasks import read_task

POINT = StructType(
    NestedField(1, "x", IntegerType(), required=False),
    NestedField(2, "label", StringType(), required=False),
)
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "points", ListType(3, POINT, element_required=False), required=False),
    NestedField(
        4,
        "shapes",
        MapType(5, StringType(), 6, ListType(7, POINT, element_required=False), False),
        required=False,
    ),
)
ROWS: list[dict[str, Any]] = [
    {"id": 0, "points": None, "shapes": None},
    {"id": 1, "points": [{"x": 1, "label": "a"}], "shapes": {"s": [{"x": 2, "label": None}]}},
    {"id": 2, "points": [None], "shapes": {"t": None, "u": [None]}},
    {"id": 3, "points": [], "shapes": {}},
    {"id": 4, "points": None, "shapes": {"v": []}},
    {"id": 5, "points": [{"x": None, "label": None}], "shapes": None},
]


def _metadata(tmp_path: Path, schema: Schema, **properties: str) -> TableMetadata:
    return new_table_metadata(
        schema, PartitionSpec(), SortOrder(), str(tmp_path), {"format-version": "2", **properties}
    )


def _data_file(path: Path, content: DataFileContent, rows: int) -> DataFile:
    data_file = DataFile.from_args(
        content=content,
        file_path=str(path),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=path.stat().st_size,
    )
    data_file.spec_id = 0
    return data_file


def _task(
    tmp_path: Path,
    file_schema: Schema,
    rows: list[dict[str, Any]],
    *,
    deleted: tuple[int, ...] = (),
    field_ids: bool = True,
) -> FileScanTask:
    """A task of a data file holding rows as file_schema's columns, and of a positional delete
    file naming the positions deleted."""
    path = tmp_path / "data.parquet"
    arrow_schema = schema_to_pyarrow(file_schema, include_field_ids=field_ids)
    pq.write_table(pa.Table.from_pylist(rows, arrow_schema), path)
    delete_files = set()
    if deleted:
        deletes = tmp_path / "deletes.parquet"
        positions = {"file_path": [str(path)] * len(deleted), "pos": list(deleted)}
        positions_schema = pa.schema([("file_path", pa.string()), ("pos", pa.int64())])
        pq.write_table(pa.table(positions, schema=positions_schema), deletes)
        delete_files.add(_data_file(deletes, DataFileContent.POSITION_DELETES, len(deleted)))
    data_file = _data_file(path, DataFileContent.DATA, len(rows))
    return FileScanTask(data_file, delete_files=delete_files)


def _read(metadata: TableMetadata, task: FileScanTask) -> list[dict[str, Any]]:
    batches = read_task(PyArrowFileIO(), metadata, metadata.schema(), task)
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches).to_pylist()
    return rows


def _as_read(rows: list[dict[str, Any]], schema: Schema = SCHEMA) -> list[dict[str, Any]]:
    """rows as Arrow gives them back (maps as lists of pairs)."""
    read: list[dict[str, Any]] = pa.Table.from_pylist(rows, schema_to_pyarrow(schema)).to_pylist()
    return read


def test_deleted_rows_are_dropped_and_every_null_is_kept(tmp_path: Path) -> None:
    metadata = _metadata(tmp_path, SCHEMA)
    task = _task(tmp_path, metadata.schema(), ROWS, deleted=(1, 3))
    assert _read(metadata, task) == _as_read([ROWS[0], ROWS[2], ROWS[4], ROWS[5]])
    # what this guards against: pyiceberg's own scan reads the null lists as empty ones
    scanned = ArrowScan(metadata, PyArrowFileIO(), metadata.schema(), AlwaysTrue())
    assert scanned.to_table([task]).column("points").to_pylist()[0] == []


def test_a_file_with_no_rows_left_reads_as_none(tmp_path: Path) -> None:
    metadata = _metadata(tmp_path, SCHEMA)
    task = _task(tmp_path, metadata.schema(), ROWS[:2], deleted=(0, 1))
    assert list(read_task(PyArrowFileIO(), metadata, metadata.schema(), task)) == []


def test_renamed_and_added_columns_are_matched_by_field_id(tmp_path: Path) -> None:
    evolved = Schema(
        NestedField(1, "key", LongType(), required=False),
        *SCHEMA.fields[1:],
        NestedField(99, "added", StringType(), required=False),
    )
    metadata = _metadata(tmp_path, evolved)
    table_schema = metadata.schema()
    # the file was written before: its columns have the old names and lack the added one
    old_names = {"key": "id"}
    file_schema = Schema(
        *(
            NestedField(f.field_id, old_names.get(f.name, f.name), f.field_type, required=False)
            for f in table_schema.fields
            if f.name != "added"
        )
    )
    task = _task(tmp_path, file_schema, ROWS)
    expected = [{"key": row.pop("id"), **row, "added": None} for row in _as_read(ROWS)]
    assert _read(metadata, task) == expected


def test_a_file_without_field_ids_is_read_through_the_name_mapping(tmp_path: Path) -> None:
    mapping = _metadata(tmp_path, SCHEMA).schema().name_mapping.model_dump_json()
    metadata = _metadata(tmp_path, SCHEMA, **{"schema.name-mapping.default": mapping})
    task = _task(tmp_path, metadata.schema(), ROWS, deleted=(0,), field_ids=False)
    assert _read(metadata, task) == _as_read(ROWS[1:])
