"""How the columns of one data file become the rows of a projection of its table.

Columns are matched by Iceberg field id (or through the table's name mapping when the file has
none), renamed and promoted to the table's types, the values of projected columns the file lacks
(identity partition values, defaults) filled in, as pyiceberg's scans do, but keeping every null
at every depth (see lake_tables.pyiceberg_arrow). The result service's pages and streams and a
workflow's reads of Iceberg tables both read data files this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import ListType, MapType

from lake_tables.pyiceberg_arrow import column_projection_values, project


def projected_field_ids(projected: Schema) -> set[int]:
    """The fields a read of projected needs from a file: lists and maps through their
    children (pruning keeps a list or map whose children it keeps)."""
    return {
        field_id
        for field_id in projected.field_ids
        if not isinstance(projected.find_type(field_id), MapType | ListType)
    }


@dataclass(frozen=True)
class FileColumns:
    """The columns of one data file for one projection."""

    projected: Schema
    #: Every column of the file, as Iceberg fields.
    file_schema: Schema
    #: The file's columns the read needs, under the file's own names.
    read_schema: Schema
    #: Values of the projected fields the file lacks, by field id.
    missing: dict[int, Any]
    #: Tables before format version 3 hold no nanosecond timestamps: such files are read as µs.
    downcast_ns_timestamp_to_us: bool

    @classmethod
    def of(
        cls,
        metadata: TableMetadata,
        table_schema: Schema,
        projected: Schema,
        *,
        data_file: DataFile,
        file_arrow_schema: pa.Schema,
        field_ids: set[int],
    ) -> FileColumns:
        """The columns of data_file (whose Arrow schema is file_arrow_schema) that a read of
        projected needs, with field_ids (projected's and any filter's)."""
        downcast = metadata.format_version <= 2
        file_schema = pyarrow_to_schema(
            file_arrow_schema,
            metadata.name_mapping(),
            downcast_ns_timestamp_to_us=downcast,
            format_version=metadata.format_version,
        )
        missing = column_projection_values(
            data_file,
            projected,
            table_schema,
            metadata.specs().get(data_file.spec_id),
            file_schema.field_ids,
        )
        read_schema = prune_columns(file_schema, field_ids, select_full_types=False)
        return cls(projected, file_schema, read_schema, missing, downcast)

    @property
    def names(self) -> list[str]:
        """The file's top-level columns to read."""
        return [column.name for column in self.read_schema.columns]

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """batch, read from the file's columns named by names, as rows of the projection."""
        return project(
            self.projected,
            self.read_schema,
            batch,
            downcast_ns_timestamp_to_us=self.downcast_ns_timestamp_to_us,
            projected_missing_fields=self.missing,
            allow_timestamp_tz_mismatch=True,
        )
