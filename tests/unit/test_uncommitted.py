"""An execution's data folder is derived only from a location inside its warehouse."""

from __future__ import annotations

import pytest

from lake_tables.uncommitted import UnsafeLocation, data_folder

ROOT = "s3://bucket/lake"


def test_the_data_folder_is_the_executions_own_under_the_table() -> None:
    location = "s3://bucket/lake/0191/results/t1"
    assert data_folder(location, "ex-1", ROOT) == f"{location}/data/ex-1"
    assert data_folder(location + "/", "ex-1", ROOT) == f"{location}/data/ex-1"
    assert data_folder(location, "ex-1") == f"{location}/data/ex-1"


@pytest.mark.parametrize(
    "location",
    [
        "s3://bucket/lake",  # the warehouse itself, not a table in it
        "s3://bucket/lakehouse/t1",  # a sibling whose name starts alike
        "s3://other/lake/t1",
        "s3://bucket/lake/../secrets/t1",
        "s3://bucket/lake/./t1",
        "s3://bucket/lake//t1",
        "s3://bucket/lake/t1?versionId=1",
        "file:///etc/lake/t1",
        "http://bucket/lake/t1",
        "s3:///lake/t1",
        "/lake/t1",
    ],
)
def test_locations_outside_the_warehouse_are_refused(location: str) -> None:
    with pytest.raises(UnsafeLocation):
        data_folder(location, "ex-1", ROOT)


@pytest.mark.parametrize("execution_id", ["", "..", "a/b", "ex-1/../ex-2", "-x", "a" * 65])
def test_ids_that_are_not_execution_ids_are_refused(execution_id: str) -> None:
    with pytest.raises(UnsafeLocation):
        data_folder("s3://bucket/lake/t1", execution_id, ROOT)
