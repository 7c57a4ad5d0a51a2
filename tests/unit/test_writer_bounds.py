"""Values no result table can hold are refused before they are written, the column named."""

from __future__ import annotations

import re
from datetime import date, datetime

import pyarrow as pa
import pytest

from cu_service.writer.bounds import UnwritableValue, check_bounds

DAY_AFTER_9999 = 2_932_897
DAY_BEFORE_YEAR_1 = -719_163


def batch(name: str, array: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([array], names=[name])


def test_dates_and_timestamps_within_years_1_to_9999_pass() -> None:
    check_bounds(
        pa.RecordBatch.from_pydict(
            {
                "d": [date(1, 1, 1), date(9999, 12, 31), None],
                "t": [datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999), None],
                "n": [1, 2, 3],
            }
        )
    )


@pytest.mark.parametrize(
    ("array", "column", "when"),
    [
        (pa.array([0, DAY_AFTER_9999], pa.int32()).cast(pa.date32()), "'d'", "after year 9999"),
        (pa.array([DAY_BEFORE_YEAR_1], pa.int32()).cast(pa.date32()), "'d'", "before year 1"),
        (
            pa.array([DAY_AFTER_9999 * 86_400_000_000], pa.int64()).cast(pa.timestamp("us", "UTC")),
            "'d'",
            "after year 9999",
        ),
        (
            pa.array([[0], [DAY_AFTER_9999]], pa.list_(pa.int32())).cast(pa.list_(pa.date32())),
            "'d (elements)'",
            "after year 9999",
        ),
        (
            pa.StructArray.from_arrays(
                [pa.array([DAY_BEFORE_YEAR_1], pa.int32()).cast(pa.date32())], names=["inner"]
            ),
            "'d.inner'",
            "before year 1",
        ),
    ],
    ids=["date after", "date before", "timestamp after", "in a list", "in a struct"],
)
def test_values_outside_name_their_column(array: pa.Array, column: str, when: str) -> None:
    with pytest.raises(UnwritableValue, match=f"column {re.escape(column)} holds a .* {when}"):
        check_bounds(batch("d", array))
