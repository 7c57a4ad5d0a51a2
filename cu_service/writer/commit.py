"""Committing to a table exactly once, through short outages of the catalog and storage.

Every snapshot an execution commits carries in its summary the execution's id
and the commit's sequence number on that table. A commit that fails for a
passing reason is retried with backoff within the retry window; before each
attempt the table is loaded again (fresh vended credentials too) and, if a
snapshot with the same mark is already there, an earlier attempt landed and
only its answer was lost: it is not committed again.

A commit can also be made in two steps (PreparedCommit): first its files are
written (data, manifests, manifest list), which can go side by side with other
work, then the catalog is told. Nothing is visible before the second step; a
prepared commit that is never made leaves only files no metadata references,
which table maintenance removes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, Transaction
from pyiceberg.typedef import Record

from catalog_map.credentials import CredentialTerm, storage_properties
from lake_tables.naming import COMMIT_SEQUENCE, EXECUTION_ID
from lake_tables.pyiceberg_arrow import MetadataOnceTransaction
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

log = logging.getLogger("cu_service.writer")

#: A change to a table that commits one snapshot, with the summary properties it is given.
Change = Callable[[Table, dict[str, str]], None]
#: The same change staged in a transaction, which commits it when asked.
Stage = Callable[[Transaction, dict[str, str]], None]


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
    soon after (within max_age seconds, and while its credentials are not due for renewal)
    uses it instead of loading it again; every other attempt loads the table."""

    def __init__(self, table: Table, max_age_seconds: float) -> None:
        self._table: Table | None = table
        self._until = time.monotonic() + max_age_seconds
        self._credentials = CredentialTerm.of(
            storage_properties(dict(table.io.properties)), time.time(), renewable=True
        )

    def loader(self, load: Callable[[], Table]) -> Callable[[], Table]:
        def first_or_load() -> Table:
            table, self._table = self._table, None
            usable = time.monotonic() < self._until and not self._credentials.renewal_due()
            return table if table is not None and usable else load()

        return first_or_load


def committing(stage: Stage) -> Change:
    """The change that stages stage in a transaction of its own and commits it."""

    def change(table: Table, properties: dict[str, str]) -> None:
        with MetadataOnceTransaction(table) as transaction:
            stage(transaction, properties)

    return change


def commit_once(
    load: Callable[[], Table], change: Change, mark: CommitMark, policy: RetryPolicy
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


class PreparedCommit:
    """commit_once in two steps. prepare() loads the table and writes what the commit adds,
    without telling the catalog; commit() tells it, and if that fails for a passing reason
    or because the table moved meanwhile, does the whole commit again with commit_once (which
    finds it if it had landed). A prepare() that fails for a passing reason leaves it all to
    commit()."""

    def __init__(
        self, load: Callable[[], Table], stage: Stage, mark: CommitMark, policy: RetryPolicy
    ) -> None:
        self._load = load
        self._stage = stage
        self._mark = mark
        self._policy = policy
        self._transaction: Transaction | None = None
        self._landed: Table | None = None

    def prepare(self) -> None:
        try:
            table = self._load()
            if self._mark.landed_in(table):
                self._landed = table
                return
            transaction = MetadataOnceTransaction(table)
            self._stage(transaction, self._mark.properties())
            self._transaction = transaction
        except Exception as exc:
            if not transient_table_failure(exc):
                raise
            log.info("could not prepare a commit; it is made in one step", exc_info=exc)

    def make(self) -> Table:
        """Both steps, one after the other; the table after the commit."""
        self.prepare()
        return self.commit()

    def commit(self) -> Table:
        """Returns the table after the commit."""
        if self._landed is not None:
            return self._landed
        transaction, self._transaction = self._transaction, None
        if transaction is not None:
            try:
                return transaction.commit_transaction()
            except Exception as exc:
                if not (transient_table_failure(exc) or isinstance(exc, CommitFailedException)):
                    raise
                log.info("a prepared commit failed; committing again", exc_info=exc)
        return commit_once(self._load, committing(self._stage), self._mark, self._policy)


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


def append_files(described: Iterable[dict[str, Any]]) -> Stage:
    """Appending the files tasks wrote, in one fast-append snapshot."""
    entries = list(described)

    def stage(transaction: Transaction, properties: dict[str, str]) -> None:
        spec_id = transaction.table_metadata.default_spec_id
        with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for entry in entries:
                append.append_data_file(data_file(entry, spec_id))

    return stage


def append_rows(rows: pa.Table) -> Stage:
    """Appending rows (written as new data files), in one snapshot."""

    def stage(transaction: Transaction, properties: dict[str, str]) -> None:
        transaction.append(rows, snapshot_properties=properties)

    return stage
