"""Rows as JSON values (google.protobuf.Struct), by Iceberg type.

No value loses precision: a JSON number is a double, so longs outside
±(2^53 - 1), decimals and all dates and times travel as strings. The
type mapping table in docs/results.md is the contract this module implements.
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf.struct_pb2 import Struct
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

JsonValue = None | bool | float | str | list[Any] | dict[str, Any]
_Convert = Callable[[Any], JsonValue]
_MAX_EXACT_INTEGER = 2**53 - 1


def _identity(value: Any) -> JsonValue:
    return value  # type: ignore[no-any-return]


def _long(value: int) -> JsonValue:
    return value if -_MAX_EXACT_INTEGER <= value <= _MAX_EXACT_INTEGER else str(value)


def _floating(value: float) -> JsonValue:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _decimal(value: Decimal) -> JsonValue:
    return format(value, "f")


def _bytes(value: bytes) -> JsonValue:
    return base64.b64encode(value).decode()


def _uuid(value: uuid.UUID | bytes) -> JsonValue:
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=value))


def _local_timestamp(value: datetime) -> JsonValue:
    return value.replace(tzinfo=None).isoformat(timespec="microseconds")


def _utc_timestamp(value: datetime) -> JsonValue:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _date_or_time(value: date | time) -> JsonValue:
    return value.isoformat()


def _converter(kind: IcebergType) -> _Convert:
    """The function that turns a Python value of the Arrow column into its JSON value."""
    if isinstance(kind, StructType):
        fields = [(f.name, _nullable(_converter(f.field_type))) for f in kind.fields]
        return lambda row: {name: convert(row.get(name)) for name, convert in fields}
    if isinstance(kind, ListType):
        element = _nullable(_converter(kind.element_type))
        return lambda items: [element(item) for item in items]
    if isinstance(kind, MapType):
        key, value = _nullable(_converter(kind.key_type)), _nullable(_converter(kind.value_type))
        if isinstance(kind.key_type, StringType):
            return lambda pairs: {k: value(v) for k, v in pairs}
        return lambda pairs: [{"key": key(k), "value": value(v)} for k, v in pairs]
    simple: dict[type[IcebergType], _Convert] = {
        LongType: _long,
        FloatType: _floating,
        DoubleType: _floating,
        DateType: _date_or_time,
        TimeType: _date_or_time,
        DecimalType: _decimal,
        BinaryType: _bytes,
        FixedType: _bytes,
        UUIDType: _uuid,
        TimestampType: _local_timestamp,
        TimestampNanoType: str,
        TimestamptzType: _utc_timestamp,
        TimestamptzNanoType: str,
    }
    for iceberg_type, convert in simple.items():
        if isinstance(kind, iceberg_type):
            return convert
    return _identity  # boolean, int, string


def _nullable(convert: _Convert) -> _Convert:
    return lambda value: None if value is None else convert(value)


def to_structs(rows: pa.Table, schema: Schema) -> list[Struct]:
    """One Struct per row; schema is the Iceberg schema of rows' columns."""
    if rows.num_rows == 0:
        return []
    columns = [
        (
            column.name,
            _nullable(_converter(column.field_type)),
            rows.column(column.name).to_pylist(),
        )
        for column in schema.columns
    ]
    structs = []
    for index in range(rows.num_rows):
        struct = Struct()
        struct.update({name: convert(values[index]) for name, convert, values in columns})
        structs.append(struct)
    return structs
