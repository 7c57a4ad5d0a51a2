"""Runtime statistics and console messages: filters over their tables, and their messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, In, Reference
from pyiceberg.expressions.literals import literal

from texera.lake.v1 import result_pb2


def _timestamp(value: Any) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _enum_value(enum: Any, prefix: str, name: str) -> int:
    """The number of enum value prefix+name; 0 (unspecified) for a name it does not have."""
    full = f"{prefix}{name}"
    return int(enum.Value(full)) if full in enum.keys() else 0  # noqa: SIM118 - not a dict


def _one_of(column: str, values: set[str]) -> BooleanExpression:
    return In(term=Reference(column), values={literal(value) for value in values})


def operator_filter(operator_ids: Sequence[str]) -> BooleanExpression:
    return _one_of("operator_id", set(operator_ids)) if operator_ids else AlwaysTrue()


def level_filter(min_level: result_pb2.ConsoleLevel.ValueType) -> BooleanExpression:
    """Levels at min_level or above; every level when unspecified."""
    if min_level == result_pb2.CONSOLE_LEVEL_UNSPECIFIED:
        return AlwaysTrue()
    names = {
        name.removeprefix("CONSOLE_LEVEL_")
        for name, number in result_pb2.ConsoleLevel.items()
        if number >= min_level
    }
    return _one_of("level", names)


def latest_per_operator(rows: pa.Table) -> pa.Table:
    """The newest sample of each operator (the last written when times tie), oldest first."""
    newest: dict[str, int] = {}
    times = rows.column("sample_time").to_pylist()
    for index, operator_id in enumerate(rows.column("operator_id").to_pylist()):
        kept = newest.get(operator_id)
        if kept is None or times[index] >= times[kept]:
            newest[operator_id] = index
    order = sorted(newest.values(), key=lambda index: (times[index], index))
    return rows.take(pa.array(order, pa.int64()))


def statistics(rows: pa.Table) -> list[result_pb2.RuntimeStatistic]:
    return [
        result_pb2.RuntimeStatistic(
            operator_id=row["operator_id"],
            sample_time=_timestamp(row["sample_time"]),
            state=result_pb2.OperatorState.ValueType(
                _enum_value(result_pb2.OperatorState, "OPERATOR_STATE_", row["state"])
            ),
            input_rows=row["input_rows"],
            output_rows=row["output_rows"],
            input_bytes=row["input_bytes"],
            output_bytes=row["output_bytes"],
            elapsed=Duration(
                seconds=row["elapsed_ms"] // 1000, nanos=row["elapsed_ms"] % 1000 * 1_000_000
            ),
        )
        for row in rows.to_pylist()
    ]


def console_messages(rows: pa.Table) -> list[result_pb2.ConsoleMessage]:
    return [
        result_pb2.ConsoleMessage(
            operator_id=row["operator_id"],
            log_time=_timestamp(row["log_time"]),
            level=result_pb2.ConsoleLevel.ValueType(
                _enum_value(result_pb2.ConsoleLevel, "CONSOLE_LEVEL_", row["level"])
            ),
            message=row["message"],
            traceback=row["traceback"],
        )
        for row in rows.to_pylist()
    ]
