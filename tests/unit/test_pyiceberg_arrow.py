"""The adapter to pyiceberg's private helpers: it keeps every null that pyiceberg's own
projection turns into an empty list or map, its transactions agree with pyiceberg's, and it
fails loudly once pyiceberg moves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg import __version__ as pyiceberg_version
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import load_file_io
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import (
    _ConvertToIcebergWithoutIDs,
    _to_requested_schema,
    pyarrow_to_schema,
    visit_pyarrow,
)
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Transaction

from lake_tables.pyiceberg_arrow import (
    FILE_IO_PROPERTIES,
    PYICEBERG_VERSION,
    MetadataOnceTransaction,
    SmallWritesFileIO,
    project,
)
from tests.unit.file_questions import locations_asked

POINT = pa.struct([("x", pa.int32()), ("label", pa.string())])
ROWS = pa.table(
    {
        "id": pa.array([0, 1, 2, 3, 4], pa.int64()),
        "points": pa.array([None, [{"x": 1, "label": "a"}], [None], [], None], pa.list_(POINT)),
        "shapes": pa.array(
            [None, [("a", {"x": None, "label": None})], [("b", None)], [], None],
            pa.map_(pa.string(), POINT),
        ),
        "grid": pa.array([None, [None, [1]], [[]], [], [None]], pa.list_(pa.list_(pa.int32()))),
        "nest": pa.array(
            [
                None,
                {"inner": None, "items": [None], "tags": {"t": None}},
                {"inner": {"v": 1}, "items": None, "tags": None},
                {"inner": None, "items": [], "tags": {}},
                {"inner": {"v": None}, "items": [{"q": None}], "tags": None},
            ],
            pa.struct(
                [
                    ("inner", pa.struct([("v", pa.int32())])),
                    ("items", pa.list_(pa.struct([("q", pa.int8())]))),
                    ("tags", pa.map_(pa.string(), pa.string())),
                ]
            ),
        ),
    }
)
PARQUET = FileFormatFactory.get(FileFormat.PARQUET)


def _schemas(table: pa.Table) -> tuple[Schema, Schema]:
    """The Iceberg schema of a table made from these rows, and the rows' own schema."""
    schema = assign_fresh_schema_ids(visit_pyarrow(table.schema, _ConvertToIcebergWithoutIDs()))
    return schema, pyarrow_to_schema(table.schema, name_mapping=schema.name_mapping)


def test_the_adapter_was_checked_against_the_installed_pyiceberg() -> None:
    """When this fails, pyiceberg moved: check that its private helpers still do what
    lake_tables.pyiceberg_arrow expects (and whether #3833 is fixed), then move the pin."""
    assert pyiceberg_version == PYICEBERG_VERSION


def test_pyiceberg_alone_still_turns_null_lists_of_structs_into_empty_ones() -> None:
    """What the adapter works around; when this fails, pyiceberg fixed it and project() can
    call it directly."""
    schema, rows_schema = _schemas(ROWS)
    batch = ROWS.to_batches()[0]
    projected = _to_requested_schema(
        schema, rows_schema, batch, include_field_ids=True, format_model=PARQUET
    )
    assert projected.column("points").to_pylist()[0] == []


@pytest.mark.parametrize("start", [0, 1, 3])
def test_writing_keeps_every_null_at_every_depth(tmp_path: Any, start: int) -> None:
    schema, rows_schema = _schemas(ROWS)
    batch = ROWS.to_batches()[0].slice(start)
    projected = project(schema, rows_schema, batch, include_field_ids=True, format_model=PARQUET)
    assert projected.to_pylist() == batch.to_pylist()
    assert projected.schema.field("points").metadata == {b"PARQUET:field_id": b"2"}
    pq.write_table(pa.Table.from_batches([projected]), tmp_path / "rows.parquet")
    assert pq.read_table(tmp_path / "rows.parquet").to_pylist() == batch.to_pylist()


def test_reading_keeps_every_null_of_a_projection() -> None:
    schema, _ = _schemas(ROWS)
    wanted = schema.select("nest", "points")
    batch = ROWS.to_batches()[0].slice(1)
    projected = project(wanted, schema, batch)
    assert projected.schema.names == ["points", "nest"]  # in the table's order
    assert projected.to_pylist() == batch.select(["points", "nest"]).to_pylist()


def test_catalogs_given_the_properties_write_small_s3_files_in_one_request() -> None:
    """The file system keeps everything pyiceberg set and opens files for writing lazily."""
    properties = {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.secret-access-key": "secret",
        "s3.region": "eu-west-1",
    }
    io = load_file_io({**FILE_IO_PROPERTIES, **properties}, "s3://bucket/table")
    assert isinstance(io, SmallWritesFileIO)
    filesystem = io.fs_by_scheme("s3", "bucket")
    _, (options,) = filesystem.__reduce__()
    assert options["allow_delayed_open"] is True
    assert options["region"] == "eu-west-1"
    assert options["access_key"] == "AKIAEXAMPLE"
    assert options["endpoint_override"] == "http://127.0.0.1:9"


def test_an_append_knows_its_files_lengths_without_asking_the_storage(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data file's and the manifest's lengths come from what was written (on S3, each
    asked would be a HEAD request), and are their real lengths."""
    catalog = SqlCatalog(
        "t",
        uri=f"sqlite:///{tmp_path}/c.db",
        warehouse=f"file://{tmp_path}",
        **FILE_IO_PROPERTIES,
    )
    catalog.create_namespace("n")
    rows = pa.table({"id": pa.array(range(1000), pa.int64())})
    table = catalog.create_table("n.t", schema=rows.schema)
    asked = locations_asked(monkeypatch, "_file_info")
    table.append(rows)
    [manifest] = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    [data_file] = [task.file for task in table.scan().plan_files()]
    assert manifest.manifest_path not in asked
    assert data_file.file_path not in asked
    assert data_file.file_size_in_bytes == _local(data_file.file_path).stat().st_size
    assert manifest.manifest_length == _local(manifest.manifest_path).stat().st_size


def _local(location: str) -> Path:
    return Path(location.removeprefix("file://"))


def test_a_transaction_works_its_metadata_out_once_per_set_of_updates(tmp_path: Any) -> None:
    """What pyiceberg's Transaction says, each state worked out once: the same object until
    an update is staged, then one with the update; the append commits as pyiceberg's does."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("n.t", schema=rows.schema)
    transaction = MetadataOnceTransaction(table)
    before = transaction.table_metadata
    assert transaction.table_metadata is before
    assert before == Transaction(table).table_metadata
    transaction.set_properties({"k": "v"})
    staged = transaction.table_metadata
    assert staged is not before
    assert staged.properties["k"] == "v"
    assert transaction.table_metadata is staged
    transaction.append(rows)
    transaction.commit_transaction()
    reloaded = catalog.load_table("n.t")
    assert reloaded.properties["k"] == "v"
    assert reloaded.scan().to_arrow().num_rows == 2
