"""Scan plans: the data files of one snapshot that a filter may match, in a fixed order.

Files are ordered by the sequence number of the commit that added them, then
as that commit listed them, which is the order the writer produced the rows
in. A plan of a snapshot never changes, so positions in it (file ordinal, row
within the file) stay valid for as long as the snapshot exists, and plans are
cached. Each planned file carries its record count from the manifest and
whether the filter provably holds for all its rows (from the column
statistics), which is what lets a skip pass over whole files without reading
them.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from functools import cached_property

from cachetools import LRUCache
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import ManifestGroupPlanner, Table
from pyiceberg.table.snapshots import Snapshot

from lake_tables.pyiceberg_arrow import all_rows_match


class RowLevelDeletesError(Exception):
    """The snapshot has delete files; result tables are append-only and never have them."""


@dataclass(frozen=True)
class PlannedFile:
    data_file: DataFile
    #: Rows in the file, from its manifest entry.
    record_count: int
    #: The filter holds for every row of the file (always so without a filter).
    all_match: bool

    @cached_property  # asked for each message of a stream
    def digest(self) -> str:
        """A short name of the file, for page tokens to check they point at the same file."""
        return hashlib.sha256(self.data_file.file_path.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ScanPlan:
    snapshot_id: int
    files: tuple[PlannedFile, ...]

    @property
    def record_count(self) -> int:
        return sum(f.record_count for f in self.files)


def plan_scan(table: Table, snapshot: Snapshot, row_filter: BooleanExpression) -> ScanPlan:
    """Plans a scan of snapshot; blocking (reads the manifests)."""
    planner = ManifestGroupPlanner(
        table_metadata=table.metadata, io=table.io, row_filter=row_filter, case_sensitive=True
    )
    manifests = sorted(
        enumerate(snapshot.manifests(table.io)),
        key=lambda indexed: (indexed[1].sequence_number or 0, indexed[0]),
    )
    entries = []
    for per_manifest in planner.plan_manifest_entries([m for _, m in manifests]):
        for entry in per_manifest:
            if entry.data_file.content != DataFileContent.DATA:
                raise RowLevelDeletesError(entry.data_file.file_path)
            entries.append(entry)
    # Entries keep the sequence number of the commit that added them, even in merged manifests.
    entries.sort(key=lambda entry: entry.sequence_number or 0)
    all_match = (
        (lambda _: True)
        if row_filter == AlwaysTrue()
        else all_rows_match(table.metadata.schema(), row_filter)
    )
    return ScanPlan(
        snapshot_id=snapshot.snapshot_id,
        files=tuple(
            PlannedFile(e.data_file, e.data_file.record_count, all_match(e.data_file))
            for e in entries
        ),
    )


class PlanCache:
    """Plans by (table, snapshot, filter), least recently used first out; thread-safe."""

    def __init__(self, max_entries: int) -> None:
        self._plans: LRUCache[tuple[str, int, str], ScanPlan] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()

    def plan(self, table: Table, snapshot: Snapshot, row_filter: BooleanExpression) -> ScanPlan:
        key = (str(table.metadata.table_uuid), snapshot.snapshot_id, repr(row_filter))
        with self._lock:
            if (cached := self._plans.get(key)) is not None:
                return cached
        planned = plan_scan(table, snapshot, row_filter)
        with self._lock:
            self._plans[key] = planned
        return planned
