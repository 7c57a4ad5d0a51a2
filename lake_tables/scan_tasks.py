"""Reading one planned scan task of an Iceberg table (a data file and its delete files) as
rows of the scan's projection, with every null kept at every depth.

pyiceberg's ArrowScan would read the same rows but loses the nulls of lists and maps of structs
(see lake_tables.pyiceberg_arrow), and once it has dropped deleted rows its batches no longer
line up with the file's, so the nulls cannot be put back afterwards. The task is read here as
ArrowScan reads it instead: the file's columns for the projection, the positions its delete
files name dropped with pyiceberg's own delete reading, then projected keeping every null.
Equality deletes never reach a task: pyiceberg's planning refuses a snapshot that has them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from lake_tables.file_columns import FileColumns, projected_field_ids
from lake_tables.pyiceberg_arrow import data_file_format, positional_deletes, positions_kept


def read_task(
    io: FileIO, metadata: TableMetadata, projected: Schema, task: FileScanTask
) -> Iterator[pa.RecordBatch]:
    """The rows of task's data file that no delete file deletes, as rows of projected."""
    deleted = positional_deletes(io, task)
    with io.new_input(task.file.file_path).open() as stream:
        fragment = data_file_format(task.file.file_format).make_fragment(stream)
        columns = FileColumns.of(
            metadata,
            metadata.schema(),
            projected,
            data_file=task.file,
            file_arrow_schema=fragment.physical_schema,
            field_ids=projected_field_ids(projected),
        )
        scanner = ds.Scanner.from_fragment(
            fragment, schema=fragment.physical_schema, columns=columns.names
        )
        start = 0
        for batch in scanner.to_batches():
            kept = batch
            if deleted:
                kept = batch.take(positions_kept(deleted, start, start + batch.num_rows))
            start += batch.num_rows
            if kept.num_rows:
                yield columns.rows(kept)
