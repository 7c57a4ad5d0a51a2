"""What an Iceberg table stores, from its metadata alone (a LoadTableResult's `metadata`).

The summary of the current snapshot carries the table's running totals (`total-files-size`,
`total-data-files`, `total-records`), kept by every writer that follows the Iceberg spec, so
one metadata read answers without opening a manifest. Figures that are missing or not
non-negative integers make the table unreadable rather than silently zero.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

#: Summary totals, and the figure each becomes.
_TOTALS = {"total-files-size": "bytes", "total-data-files": "data_files", "total-records": "rows"}


class UnreadableMetadata(Exception):
    """The metadata lacks a figure or holds one that is no count."""


@dataclass(frozen=True)
class Usage:
    bytes: int = 0
    data_files: int = 0
    rows: int = 0
    snapshots: int = 0
    tables: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)}
        )


def _count(value: Any, what: str) -> int:
    text = str(value)
    if not text.isascii() or not text.isdigit():
        raise UnreadableMetadata(f"{what} is {text[:40]!r}, not a count")
    return int(text)


def table_usage(metadata: dict[str, Any]) -> Usage:
    """The table's figures: its current snapshot's totals and the snapshots it keeps."""
    snapshots = metadata.get("snapshots") or []
    current_id = metadata.get("current-snapshot-id")
    if current_id is None or current_id == -1:  # created, nothing committed yet
        return Usage(snapshots=len(snapshots), tables=1)
    current = next((s for s in snapshots if s.get("snapshot-id") == current_id), None)
    if current is None:
        raise UnreadableMetadata(f"the current snapshot {current_id} is not among the snapshots")
    summary = current.get("summary") or {}
    totals = {}
    for key, figure in _TOTALS.items():
        if key not in summary:
            raise UnreadableMetadata(f"the current snapshot's summary has no {key}")
        totals[figure] = _count(summary[key], key)
    return Usage(**totals, snapshots=len(snapshots), tables=1)
