"""Reading one data file from a row position, with a projection and a filter.

Positions are physical: the index of a row in the file before filtering. A
read from row r opens the file's footer, skips every row group that ends at or
before r without reading it, and reads on from the row group holding r, so a
page deep in a file costs about what the first page costs. With a filter,
each chunk carries the physical position of every row it kept, so a page that
stops inside a chunk knows exactly where the next page starts.

Columns are matched by Iceberg field id and converted to the table's types
as lake_tables.file_columns describes, keeping every null.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind, extract_field_ids, translate_column_names
from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from catalog_map.credentials import RenewingFileIO
from lake_tables.file_columns import FileColumns, projected_field_ids
from lake_tables.pyiceberg_arrow import ensure_small_types
from result_service.metrics import ROWS_READ

_POSITION = "__texera_row_position"
#: Small reads (a page) fetch column chunks in pieces of this size, as far as they need.
_PIECE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Chunk:
    """Rows of one file: physical rows [start, end), less those the filter dropped."""

    rows: pa.RecordBatch
    start: int
    end: int
    #: Physical position of each row when a filter dropped some; None when rows are contiguous.
    positions: pa.Int64Array | None = None

    def position_after(self, taken: int) -> int:
        """The physical row right after the first `taken` rows of this chunk."""
        if taken >= self.rows.num_rows:
            return self.end
        if self.positions is None:
            return self.start + taken
        return int(self.positions[taken - 1].as_py()) + 1 if taken else self.start


@dataclass(frozen=True)
class _FileLayout:
    """How one file's columns map to the read, and the filter in the file's names."""

    columns: FileColumns
    arrow_filter: pc.Expression | None


def served_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema rows of schema are served with: Arrow's 32-bit-offset string, binary
    and list types, whatever the files hold."""
    return ensure_small_types(schema_to_pyarrow(schema, include_field_ids=False))


class FileReader:
    """Reads data files of one table snapshot for one projection and filter; thread-safe."""

    def __init__(
        self,
        metadata: TableMetadata,
        files: RenewingFileIO,
        *,
        table_schema: Schema,
        projected: Schema,
        row_filter: BooleanExpression,
        batch_rows: int = 65_536,
        bulk: bool = True,
    ) -> None:
        """bulk: the read will likely go on for many row groups (a stream, a count), so each
        row group is fetched whole at once; otherwise only the pieces the rows need are."""
        self._metadata = metadata
        self._files = files
        self._table_schema = table_schema
        self._projected = projected
        self._bound_filter = bind(table_schema, row_filter, case_sensitive=True)
        self._batch_rows = batch_rows
        self._bulk = bulk

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The schema of every chunk's rows (see served_arrow_schema)."""
        return served_arrow_schema(self._projected)

    @cached_property
    def _field_ids(self) -> set[int]:
        """Fields to read: the projected ones and the filter's."""
        return projected_field_ids(self._projected) | extract_field_ids(self._bound_filter)

    def chunks(self, data_file: DataFile, start_row: int = 0) -> Generator[Chunk, None, None]:
        """The file's rows from physical row start_row on, in order."""
        if data_file.file_format != FileFormat.PARQUET:
            raise ValueError(f"cannot read {data_file.file_format} data files")
        with self._files.get().new_input(data_file.file_path).open() as stream:
            parquet = pq.ParquetFile(
                stream, pre_buffer=self._bulk, buffer_size=0 if self._bulk else _PIECE_BYTES
            )
            columns = FileColumns.of(
                self._metadata,
                self._table_schema,
                self._projected,
                data_file=data_file,
                file_arrow_schema=parquet.schema_arrow,
                field_ids=self._field_ids,
            )
            arrow_filter = None
            if self._bound_filter != AlwaysTrue():
                file_schema = columns.file_schema
                translated = translate_column_names(
                    self._bound_filter, file_schema, True, projected_field_values=columns.missing
                )
                arrow_filter = expression_to_pyarrow(
                    bind(file_schema, translated, True), file_schema
                )
            groups, position = _row_groups_from(parquet.metadata, start_row)
            batches = parquet.iter_batches(
                batch_size=self._batch_rows, row_groups=groups, columns=columns.names
            )
            layout = _FileLayout(columns, arrow_filter)
            for read in batches:
                ROWS_READ.inc(read.num_rows)
                chunk_start, position = position, position + read.num_rows
                if position <= start_row:
                    continue
                skipped = max(0, start_row - chunk_start)
                yield self._chunk(read.slice(skipped), chunk_start + skipped, position, layout)

    def _chunk(self, batch: pa.RecordBatch, start: int, end: int, layout: _FileLayout) -> Chunk:
        positions = None
        if layout.arrow_filter is not None:
            numbered = pa.Table.from_batches([batch]).append_column(
                _POSITION, pa.array(np.arange(start, end, dtype=np.int64))
            )
            kept = numbered.filter(layout.arrow_filter).combine_chunks()
            positions = (
                kept.column(_POSITION).chunk(0) if kept.num_rows else pa.array([], pa.int64())
            )
            batch = pa.RecordBatch.from_arrays(
                [kept.column(name).combine_chunks() for name in batch.schema.names],
                schema=batch.schema,
            )
        rows = layout.columns.rows(batch)
        if rows.schema != self.arrow_schema:
            rows = rows.cast(self.arrow_schema)
        return Chunk(rows=rows, start=start, end=end, positions=positions)


def _row_groups_from(metadata: pq.FileMetaData, start_row: int) -> tuple[list[int], int]:
    """The row groups from the one holding start_row on, and the first row of that group."""
    first_row = 0
    for index in range(metadata.num_row_groups):
        rows = metadata.row_group(index).num_rows
        if first_row + rows > start_row:
            return list(range(index, metadata.num_row_groups)), first_row
        first_row += rows
    return [], first_row
