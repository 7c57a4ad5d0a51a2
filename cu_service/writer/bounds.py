"""Values a result table cannot hold, found before they are written.

Iceberg keeps column bounds that readers turn into Python dates and
datetimes, which reach from year 1 to year 9999; Spark's reach further. A
date or timestamp outside those years (in any column, nested ones included)
is refused with the column named, instead of failing somewhere inside the
table library.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_DAY_MIN = -719_162  # 0001-01-01, in days since 1970-01-01
_DAY_MAX = 2_932_896  # 9999-12-31
_SECONDS_PER_DAY = 86_400
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class UnwritableValue(ValueError):
    """A value no table can hold; the message names the column."""


def check_bounds(batch: pa.RecordBatch) -> None:
    for field, column in zip(batch.schema, batch.columns, strict=True):
        _check(field.name, column)


def _check(name: str, array: pa.Array) -> None:
    kind = array.type
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            _check(f"{name}.{kind.field(index).name}", array.field(index))
    elif pa.types.is_map(kind):
        _check(f"{name} (keys)", array.keys)
        _check(f"{name} (values)", array.items)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        _check(f"{name} (elements)", array.flatten())
    elif pa.types.is_date32(kind):
        _check_range(name, array.cast(pa.int32()), _DAY_MIN, _DAY_MAX, "date")
    elif pa.types.is_timestamp(kind):
        per_day = _SECONDS_PER_DAY * _UNITS_PER_SECOND[kind.unit]
        low, high = _DAY_MIN * per_day, (_DAY_MAX + 1) * per_day - 1
        _check_range(name, array.cast(pa.int64()), low, high, "timestamp")


def _check_range(name: str, values: pa.Array, low: int, high: int, what: str) -> None:
    extremes = pc.min_max(values)
    smallest, largest = extremes["min"].as_py(), extremes["max"].as_py()
    if smallest is not None and smallest < low:
        raise UnwritableValue(f"column {name!r} holds a {what} before year 1, which no table holds")
    if largest is not None and largest > high:
        raise UnwritableValue(
            f"column {name!r} holds a {what} after year 9999, which no table holds"
        )
