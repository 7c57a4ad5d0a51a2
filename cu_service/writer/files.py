"""Writing a Spark partition as Iceberg data files, inside the Spark task (executor side).

Each task streams its Arrow batches into Parquet files directly in the
table's storage, rolling over to a new file at the target size (or sooner,
when the credentials it uploads with near their end: each file is opened,
and each upload finished, with credentials that have a margin left), and returns
one row per file with what the driver needs to commit it: path, size and the
column statistics Iceberg keeps. File names carry a fresh UUID per file, so no
two tasks (nor two attempts of one task) ever write the same file. A value
the table cannot hold, or any other failure but storage's, fails the task as
a failure of the operator being written (udf.OperatorFailure), so that the
execution's error names the operator and says what went wrong.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table.metadata import TableMetadata
from pyspark import TaskContext

from catalog_map.credentials import CredentialTerm
from cu_service.resource_limits import RESULT_BYTES_MARKER
from cu_service.table_access import TableAccess
from cu_service.workflow.udf import OperatorFailure, clip
from cu_service.writer.bounds import UnwritableValue, check_bounds
from lake_tables.pyiceberg_arrow import parquet_writer_options, project

#: The schema of what write_partition yields: one pickled file description per row.
FILES_SCHEMA = "file binary"
FILES_ARROW = pa.schema([("file", pa.binary())])
_PARQUET = FileFormatFactory.get(FileFormat.PARQUET)


@dataclass(frozen=True)
class WriteSpec:
    """What every task of one write needs; picklable."""

    access: TableAccess
    #: The operator whose output this is.
    operator_id: str
    #: Where the files go: ``<table location>/data/<execution id>``.
    data_location: str
    target_file_size: int
    #: Bytes this task may write at most (what is left of the execution's result limit).
    max_bytes: int
    row_group_rows: int = 262_144


class ResultBytesExceeded(Exception):
    """A task wrote more than its execution may; the driver fails the execution."""


class _RollingParquetWriter:
    """Parquet files of one task, each rolled over once it reaches the target size."""

    def __init__(self, spec: WriteSpec, metadata: TableMetadata, file_schema: Schema) -> None:
        self._spec = spec
        self._io = spec.access.file_io(spec.data_location)
        self._file_schema = file_schema
        self._writer_kwargs = parquet_writer_options(metadata.properties)
        self._stats_plan = compute_statistics_plan(file_schema, metadata.properties)
        self._column_mapping = parquet_path_to_id_mapping(file_schema)
        self._writer: pq.ParquetWriter | None = None
        self._stream: Any = None
        #: The credentials the open file is being uploaded with.
        self._term: CredentialTerm | None = None
        self._path = ""
        self._finished_bytes = 0
        context = TaskContext.get()
        self._task = (
            f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        )
        self.files: list[dict[str, Any]] = []

    def write(self, table: pa.Table) -> None:
        if self._credentials_ending():
            self.close_file()  # finished while its credentials last (rows came slowly)
        if self._writer is None:
            self._open(table.schema)
            assert self._writer is not None
        self._writer.write_table(table, row_group_size=max(len(table), 1))
        written = self._finished_bytes + self._stream.tell()
        if written > self._spec.max_bytes:
            raise ResultBytesExceeded(
                f"{RESULT_BYTES_MARKER} a task wrote {written} bytes, over the "
                f"{self._spec.max_bytes} its execution had left"
            )
        if self._stream.tell() >= self._spec.target_file_size or self._credentials_ending():
            self.close_file()

    def _open(self, schema: pa.Schema) -> None:
        self._path = f"{self._spec.data_location}/{self._task}-{uuid.uuid4().hex}.parquet"
        filesystem, path = self._io.filesystem(self._path)  # renewed if near their end
        self._stream = filesystem.open_output_stream(path)
        self._term = self._io.term
        self._writer = pq.ParquetWriter(
            self._stream, schema=schema, store_decimal_as_integer=True, **self._writer_kwargs
        )

    def _credentials_ending(self) -> bool:
        """The open file's upload has less than the renewal margin of its credentials left: it
        is closed, and the next rows go to a new file with renewed ones."""
        return self._writer is not None and self._term is not None and self._term.renewal_due()

    def close_file(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        size = self._stream.tell()
        self._stream.close()
        self._finished_bytes += size
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=self._writer.writer.metadata,
            stats_columns=self._stats_plan,
            parquet_column_mapping=self._column_mapping,
        )
        self.files.append(
            {"file_path": self._path, "file_size_in_bytes": size, **statistics.to_serialized_dict()}
        )
        self._writer = None


def write_partition(spec: WriteSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function of a write: consumes a partition, yields its files."""
    try:
        yield from _write_partition(spec, batches)
    except OSError:  # storage: the execution's failure, not the operator's
        raise
    except Exception as exc:
        what = str(exc) if isinstance(exc, UnwritableValue) else f"{type(exc).__name__}: {exc}"
        raise OperatorFailure(spec.operator_id, clip(what), "", "") from None


def _write_partition(
    spec: WriteSpec, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    metadata = spec.access.metadata()
    table_schema = metadata.schema()
    file_schema = sanitize_column_names(table_schema)
    writer = _RollingParquetWriter(spec, metadata, file_schema)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    batch_schema: Schema | None = None

    def flush() -> None:
        nonlocal pending, pending_rows
        if pending and batch_schema is not None:
            converted = [
                project(
                    file_schema, batch_schema, batch, include_field_ids=True, format_model=_PARQUET
                )
                for batch in pending
            ]
            writer.write(pa.Table.from_batches(converted))
            pending, pending_rows = [], 0

    for batch in batches:
        if batch.num_rows == 0:
            continue
        check_bounds(batch)
        if batch_schema is None:
            batch_schema = pyarrow_to_schema(batch.schema, name_mapping=table_schema.name_mapping)
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows >= spec.row_group_rows:  # one row group per flush
            flush()
    flush()
    writer.close_file()
    for described in writer.files:
        yield pa.RecordBatch.from_pydict({"file": [pickle.dumps(described)]}, schema=FILES_ARROW)
