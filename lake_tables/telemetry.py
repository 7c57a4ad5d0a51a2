"""Columns of an execution's runtime_stats and console_logs tables.

A statistics sample's `state` is an OperatorState name without its prefix
(PENDING, RUNNING, COMPLETED, FAILED, CANCELLED); a console message's `level`
is a ConsoleLevel name without its prefix (DEBUG, INFO, WARNING, ERROR). Rows
are appended in the order they were taken.
"""

from __future__ import annotations

import pyarrow as pa

_TIME = pa.timestamp("us", tz="UTC")
STATS_SCHEMA = pa.schema(
    [
        pa.field("operator_id", pa.string(), nullable=False),
        pa.field("sample_time", _TIME, nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("input_rows", pa.int64(), nullable=False),
        pa.field("output_rows", pa.int64(), nullable=False),
        pa.field("input_bytes", pa.int64(), nullable=False),
        pa.field("output_bytes", pa.int64(), nullable=False),
        pa.field("elapsed_ms", pa.int64(), nullable=False),
    ]
)
CONSOLE_SCHEMA = pa.schema(
    [
        pa.field("operator_id", pa.string(), nullable=False),
        pa.field("log_time", _TIME, nullable=False),
        pa.field("level", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("traceback", pa.string(), nullable=False),
    ]
)
