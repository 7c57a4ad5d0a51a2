"""The JSON mapping of result pages: every Iceberg type, exactly as the table in docs/results.md says."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import json_format
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from result_service.json_rows import to_structs

ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _one(kind: IcebergType, arrow: pa.DataType, value: Any) -> Any:
    schema = Schema(NestedField(1, "v", kind, required=False))
    rows = pa.table({"v": pa.array([value, None], arrow)})
    converted = [json_format.MessageToDict(s) for s in to_structs(rows, schema)]
    assert converted[1] == {"v": None}
    return converted[0]["v"]


def test_numbers_stay_exact() -> None:
    assert _one(BooleanType(), pa.bool_(), True) is True
    assert _one(IntegerType(), pa.int32(), -7) == -7
    assert _one(LongType(), pa.int64(), 2**53 - 1) == 2**53 - 1
    assert _one(LongType(), pa.int64(), 2**53) == str(2**53)
    assert _one(LongType(), pa.int64(), -(2**63)) == str(-(2**63))
    assert _one(FloatType(), pa.float32(), 0.5) == 0.5
    assert _one(DoubleType(), pa.float64(), float("nan")) == "NaN"
    assert _one(DoubleType(), pa.float64(), float("-inf")) == "-Infinity"
    assert _one(DecimalType(38, 10), pa.decimal128(38, 10), Decimal("-12.5")) == "-12.5000000000"
    assert _one(DecimalType(5, 0), pa.decimal128(5, 0), Decimal("100")) == "100"


def test_dates_and_times_are_iso_8601_strings() -> None:
    assert _one(DateType(), pa.date32(), date(2024, 2, 29)) == "2024-02-29"
    assert _one(TimeType(), pa.time64("us"), time(1, 2, 3, 4)) == "01:02:03.000004"
    local = datetime(2024, 3, 1, 12, 30)
    assert _one(TimestampType(), pa.timestamp("us"), local) == "2024-03-01T12:30:00.000000"
    utc = datetime(2024, 3, 1, 12, 30, 0, 5, tzinfo=UTC)
    assert (
        _one(TimestamptzType(), pa.timestamp("us", tz="UTC"), utc) == "2024-03-01T12:30:00.000005Z"
    )


def test_bytes_and_uuids() -> None:
    assert _one(StringType(), pa.string(), "héllo") == "héllo"
    assert _one(BinaryType(), pa.binary(), b"\x00\xff") == "AP8="
    assert _one(FixedType(3), pa.binary(3), b"abc") == "YWJj"
    assert _one(UUIDType(), pa.binary(16), ID.bytes) == str(ID)


def test_nested_types() -> None:
    listed = ListType(2, LongType(), element_required=False)
    assert _one(listed, pa.list_(pa.int64()), [1, None, 2**60]) == [1, None, str(2**60)]
    point = StructType(
        NestedField(3, "x", IntegerType(), required=False),
        NestedField(4, "at", DateType(), required=False),
    )
    arrow_point = pa.struct([("x", pa.int32()), ("at", pa.date32())])
    assert _one(point, arrow_point, {"x": 1, "at": date(2020, 1, 2)}) == {
        "x": 1,
        "at": "2020-01-02",
    }
    by_name = MapType(5, StringType(), 6, DecimalType(4, 1), value_required=False)
    assert _one(by_name, pa.map_(pa.string(), pa.decimal128(4, 1)), [("a", Decimal("1.5"))]) == {
        "a": "1.5"
    }
    by_day = MapType(7, DateType(), 8, LongType(), value_required=False)
    assert _one(by_day, pa.map_(pa.date32(), pa.int64()), [(date(2020, 1, 2), 3)]) == [
        {"key": "2020-01-02", "value": 3}
    ]
