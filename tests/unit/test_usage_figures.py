"""A table's usage from its metadata, and how the CLI shows byte counts."""

from __future__ import annotations

from typing import Any

import pytest

from lake_cli.usage import readable_bytes
from warehouse_service.domain.usage_figures import UnreadableMetadata, Usage, table_usage


def snapshot(snapshot_id: int, files_size: Any, data_files: Any, records: Any) -> dict[str, Any]:
    return {
        "snapshot-id": snapshot_id,
        "summary": {
            "operation": "append",
            "total-files-size": files_size,
            "total-data-files": data_files,
            "total-records": records,
        },
    }


def test_the_current_snapshots_totals_and_every_snapshot_kept() -> None:
    metadata = {
        "current-snapshot-id": 2,
        "snapshots": [snapshot(1, "100", "1", "10"), snapshot(2, "250", "3", "40")],
    }
    assert table_usage(metadata) == Usage(bytes=250, data_files=3, rows=40, snapshots=2, tables=1)


def test_a_table_without_a_commit_is_one_empty_table() -> None:
    for current in (None, -1):
        assert table_usage({"current-snapshot-id": current, "snapshots": []}) == Usage(tables=1)


@pytest.mark.parametrize(
    ("metadata", "complaint"),
    [
        ({"current-snapshot-id": 7, "snapshots": [snapshot(1, "1", "1", "1")]}, "not among"),
        (
            {"current-snapshot-id": 1, "snapshots": [{"snapshot-id": 1, "summary": {}}]},
            "has no total-files-size",
        ),
        (
            {"current-snapshot-id": 1, "snapshots": [snapshot(1, "-5", "1", "1")]},
            "not a count",
        ),
        (
            {"current-snapshot-id": 1, "snapshots": [snapshot(1, "1", "1.5", "1")]},
            "not a count",
        ),
        (
            {"current-snapshot-id": 1, "snapshots": [snapshot(1, "1", "1", "١٢")]},
            "not a count",
        ),
    ],
)
def test_figures_that_are_missing_or_no_counts_are_refused(
    metadata: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(UnreadableMetadata, match=complaint):
        table_usage(metadata)


def test_usages_add_up_figure_by_figure() -> None:
    total = Usage(1, 2, 3, 4, 1) + Usage(10, 20, 30, 40, 1)
    assert total == Usage(bytes=11, data_files=22, rows=33, snapshots=44, tables=2)


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB")],
)
def test_byte_counts_read_in_binary_units(count: int, shown: str) -> None:
    assert readable_bytes(count) == shown
