"""Inline JSON values converted to Spark's Python values, strictly by column type."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from cu_service.workflow.values import BadValue, convert


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        (3.0, LongType(), 3),
        ("9007199254740993", LongType(), 9007199254740993),
        ("NaN", DoubleType(), "nan"),
        (1.5, DoubleType(), 1.5),
        ("12.30", DecimalType(10, 2), Decimal("12.30")),
        (7, DecimalType(5, 2), Decimal("7.00")),
        ("9" * 38, DecimalType(38, 0), Decimal("9" * 38)),
        ("0." + "1" * 37, DecimalType(38, 37), Decimal("0." + "1" * 37)),
        ("-" + "1" * 30 + ".25", DecimalType(38, 2), Decimal("-" + "1" * 30 + ".25")),
        (True, BooleanType(), True),
        ("héllo", StringType(), "héllo"),
        ("aGk=", BinaryType(), b"hi"),
        ("2024-02-29", DateType(), date(2024, 2, 29)),
        ("2024-01-01T10:00:00Z", TimestampType(), datetime(2024, 1, 1, 10, tzinfo=UTC)),
        ("2024-01-01T12:00:00+02:00", TimestampType(), datetime(2024, 1, 1, 10, tzinfo=UTC)),
        ("2024-01-01T10:00:00", TimestampType(), datetime(2024, 1, 1, 10, tzinfo=UTC)),
        ("2024-01-01T10:00:00", TimestampNTZType(), datetime(2024, 1, 1, 10)),
        ([1, None, 3.0], ArrayType(IntegerType()), [1, None, 3]),
        ({"1": "a"}, MapType(IntegerType(), StringType()), {1: "a"}),
        (None, IntegerType(), None),
    ],
)
def test_values_convert_to_their_column_type(value: Any, kind: DataType, expected: Any) -> None:
    converted = convert(value, kind)
    if expected == "nan":
        assert math.isnan(converted)
    else:
        assert converted == expected


def test_structs_become_rows_and_refuse_unknown_fields() -> None:
    kind = StructType([StructField("a", IntegerType()), StructField("b", StringType())])
    assert convert({"a": 1}, kind) == Row(a=1, b=None)
    with pytest.raises(BadValue, match="unknown fields"):
        convert({"a": 1, "z": 2}, kind)


@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        (1.5, LongType(), "integer"),
        (True, LongType(), "boolean"),
        (2**40, IntegerType(), "32 bits"),
        ("1.234", DecimalType(10, 2), "decimal places"),
        ("123456.7", DecimalType(5, 1), "digits"),
        (1, StringType(), "string"),
        ("yes", BooleanType(), "true or false"),
        ("yesterday", DateType(), "YYYY-MM-DD"),
        ("2024-01-01T10:00:00+01:00", TimestampNTZType(), "no offset"),
        ("not base64!", BinaryType(), "base64"),
        ("x", ArrayType(IntegerType()), "list"),
        ("9" * 39, DecimalType(38, 0), "more than 38 digits"),
        ("1e99999", DecimalType(38, 2), "more than 38 digits"),
        ("NaN", DecimalType(10, 2), "finite"),
        ("Infinity", DecimalType(10, 2), "finite"),
        ("²", LongType(), "integer"),
        ("10000-01-01", DateType(), "year 1 to 9999"),
        ("0000-01-01", DateType(), "year 1 to 9999"),
        ("9999-12-31T23:59:59-01:00", TimestampType(), "years 1 to 9999"),
        ("0001-01-01T00:00:00+01:00", TimestampType(), "years 1 to 9999"),
    ],
)
def test_values_that_do_not_fit_say_why(value: Any, kind: DataType, reason: str) -> None:
    with pytest.raises(BadValue, match=reason):
        convert(value, kind)
