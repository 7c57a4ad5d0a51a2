"""JSON values of inline rows to Python values of a Spark type.

JSON numbers arrive as doubles (protobuf's Value), so integers beyond 2^53 and
exact decimals may also be given as strings. Dates and timestamps are ISO
8601 strings; a timestamp without an offset is taken as UTC; binary is base64.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

_INTEGER_BITS = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: Spark's widest decimal; Python's default context keeps only 28 digits.
_DECIMALS = Context(prec=38)


class BadValue(ValueError):
    """A value that does not fit its column's type; the message says why."""


def _integer(value: Any, bits: int) -> int:
    if isinstance(value, bool):
        raise BadValue("expected an integer, got a boolean")
    if (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and value.strip().lstrip("-").isdecimal()
    ):
        number = int(value)
    elif isinstance(value, int):
        number = value
    else:
        raise BadValue(f"expected an integer, got {value!r}")
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise BadValue(f"{number} does not fit in {bits} bits")
    return number


def _float(value: Any) -> float:
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(f"expected a number, got {value!r}")
    return float(value)


def _decimal(value: Any, kind: DecimalType) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadValue(f"expected a decimal number, got {value!r}")
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise BadValue(f"expected a decimal number, got {value!r}") from exc
    if not number.is_finite():
        raise BadValue(f"expected a finite decimal number, got {value!r}")
    try:
        scaled = number.quantize(Decimal(1).scaleb(-kind.scale), context=_DECIMALS)
    except InvalidOperation as exc:  # more digits than any decimal column holds
        raise BadValue(f"{value} has more than {kind.precision} digits") from exc
    if scaled != number:
        raise BadValue(f"{value} has more than {kind.scale} decimal places")
    if len(scaled.as_tuple().digits) > kind.precision:
        raise BadValue(f"{value} has more than {kind.precision} digits")
    return scaled


def _timestamp(value: Any, *, with_zone: bool) -> datetime:
    if not isinstance(value, str):
        raise BadValue(f"expected an ISO 8601 timestamp string, got {value!r}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadValue(f"expected an ISO 8601 timestamp, got {value!r}") from exc
    if not with_zone:
        if moment.tzinfo is not None:
            raise BadValue("a timestamp without time zone must have no offset")
        return moment
    try:
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError as exc:
        raise BadValue(f"{value} is outside years 1 to 9999 in UTC") from exc


def _boolean(value: Any, kind: DataType) -> bool:
    if not isinstance(value, bool):
        raise BadValue(f"expected true or false, got {value!r}")
    return value


def _string(value: Any, kind: DataType) -> str:
    if not isinstance(value, str):
        raise BadValue(f"expected a string, got {value!r}")
    return value


def _binary(value: Any, kind: DataType) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError) as exc:
        raise BadValue("expected base64-encoded bytes") from exc


def _date(value: Any, kind: DataType) -> date:
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise BadValue(f"expected a date YYYY-MM-DD from year 1 to 9999, got {value!r}") from exc


def _array(value: Any, kind: ArrayType) -> list[Any]:
    if not isinstance(value, list):
        raise BadValue(f"expected a list, got {value!r}")
    return [convert(item, kind.elementType) for item in value]


def _map(value: Any, kind: MapType) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise BadValue(f"expected an object, got {value!r}")
    key_type = kind.keyType
    return {
        convert(k if isinstance(key_type, StringType) else _json_key(k), key_type): convert(
            v, kind.valueType
        )
        for k, v in value.items()
    }


def _struct(value: Any, kind: StructType) -> Row:
    if not isinstance(value, dict):
        raise BadValue(f"expected an object, got {value!r}")
    if unknown := set(value) - set(kind.names):
        raise BadValue(f"unknown fields {sorted(unknown)}")
    return Row(**{f.name: convert(value.get(f.name), f.dataType) for f in kind.fields})


_CONVERTERS: list[tuple[type[DataType], Callable[[Any, Any], Any]]] = [
    *(
        (integer_type, lambda v, k, bits=bits: _integer(v, bits))
        for integer_type, bits in _INTEGER_BITS.items()
    ),
    (FloatType, lambda v, k: _float(v)),
    (DoubleType, lambda v, k: _float(v)),
    (DecimalType, _decimal),
    (BooleanType, _boolean),
    (StringType, _string),
    (BinaryType, _binary),
    (DateType, _date),
    (TimestampNTZType, lambda v, k: _timestamp(v, with_zone=False)),
    (TimestampType, lambda v, k: _timestamp(v, with_zone=True)),
    (ArrayType, _array),
    (MapType, _map),
    (StructType, _struct),
]


def convert(value: Any, kind: DataType) -> Any:
    """value (from JSON) as a Python value Spark accepts for kind; raises BadValue."""
    if value is None:
        return None
    for kind_type, converter in _CONVERTERS:
        if isinstance(kind, kind_type):
            return converter(value, kind)
    raise BadValue(f"inline rows cannot carry values of type {kind.simpleString()}")


def _json_key(key: str) -> Any:
    """A map key given as a JSON object's string key, for non-string key types."""
    try:
        return float(key) if any(c in key for c in ".eE") else int(key)
    except ValueError:
        return key
