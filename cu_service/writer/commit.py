"""Committing to a table exactly once, through short outages of the catalog and storage.

Every snapshot an execution commits carries in its summary the execution's id
and the commit's sequence number on that table. A commit that fails for a
passing reason is retried with backoff within the retry window; before each
attempt the table is loaded again (fresh vended credentials too) and, if a
snapshot with the same mark is already there, an earlier attempt landed and
only its answer was lost: it is not committed again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from lake_tables.naming import COMMIT_SEQUENCE, EXECUTION_ID
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

log = logging.getLogger("cu_service.writer")


@dataclass(frozen=True)
class CommitMark:
    """Which commit of which execution a snapshot is."""

    execution_id: str
    sequence: int

    def properties(self) -> dict[str, str]:
        return {EXECUTION_ID: self.execution_id, COMMIT_SEQUENCE: str(self.sequence)}

    def landed_in(self, table: Table) -> bool:
        wanted = self.properties()
        return any(
            all(snapshot.summary.get(key) == value for key, value in wanted.items())
            for snapshot in table.snapshots()
            if snapshot.summary is not None
        )


class FreshTable:
    """A table just created, so current and with newly vended credentials: the first commit
    soon after (within max_age seconds) uses it instead of loading it again; every other
    attempt loads the table."""

    def __init__(self, table: Table, max_age_seconds: float) -> None:
        self._table: Table | None = table
        self._until = time.monotonic() + max_age_seconds

    def loader(self, load: Callable[[], Table]) -> Callable[[], Table]:
        def first_or_load() -> Table:
            table, self._table = self._table, None
            return table if table is not None and time.monotonic() < self._until else load()

        return first_or_load


def commit_once(
    load: Callable[[], Table],
    change: Callable[[Table, dict[str, str]], None],
    mark: CommitMark,
    policy: RetryPolicy,
) -> Table:
    """Loads the table and applies change (which commits one snapshot with the properties it
    is given) unless a snapshot with mark is there already; transient failures are retried
    within the policy. Returns the table after the commit."""

    def attempt() -> Table:
        table = load()
        if mark.landed_in(table):
            log.info(
                "commit had landed; not repeated",
                extra={"table": ".".join(table.name()), "sequence": mark.sequence},
            )
            return table
        change(table, mark.properties())
        return table

    return retry_call(
        attempt, policy=policy, transient=transient_table_failure, what="table commit"
    )


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


def append_files(described: Iterable[dict[str, Any]]) -> Callable[[Table, dict[str, str]], None]:
    """The change that appends the files tasks wrote, in one fast-append snapshot."""
    entries = list(described)

    def change(table: Table, properties: dict[str, str]) -> None:
        with (
            table.transaction() as transaction,
            transaction.update_snapshot(snapshot_properties=properties).fast_append() as append,
        ):
            for entry in entries:
                append.append_data_file(data_file(entry, table.metadata.default_spec_id))

    return change
