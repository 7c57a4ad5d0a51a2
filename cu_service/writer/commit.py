"""Committing files that tasks wrote: one fast-append snapshot, tagged with the execution."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from lake_tables.naming import EXECUTION_ID


def data_file(described: dict[str, Any], spec_id: int) -> DataFile:
    """A DataFile from what a task returned (files.write_partition)."""
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **described,
    )


def commit(table: Table, described: Iterable[dict[str, Any]], execution_id: str) -> Table:
    """Appends the files in one snapshot whose summary names the execution; returns the table after."""
    properties = {EXECUTION_ID: execution_id}
    with (
        table.transaction() as transaction,
        transaction.update_snapshot(snapshot_properties=properties).fast_append() as append,
    ):
        for entry in described:
            append.append_data_file(data_file(entry, table.metadata.default_spec_id))
    return table
