"""Running a user's Python function over Arrow batches in Spark tasks, and what it prints.

The function runs in Spark's Python workers (mapInArrow). What it prints is
captured and sent back with the task's result through an accumulator, as
console messages of the operator. Each batch it yields is checked against
the operator's output columns (names, then a safe cast to their types). If
it raises, or yields what does not fit, the task fails with an error whose
text carries the operator id, the exception, its traceback (frames of the
user's code only) and the last printed lines between markers, so the driver
can record all of it even though a failed task's accumulator updates are
dropped. The writer reports its failures with the same markers.
"""

from __future__ import annotations

import contextlib
import io
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.accumulators import Accumulator, AccumulatorParam

MAX_MESSAGE_CHARS = 64 * 1024
MAX_MESSAGES_PER_TASK = 1000
_FAILURE = re.compile(
    r"\[texera-operator (?P<operator>[A-Za-z0-9_-]+)\] (?P<error>.*?)\n"
    r"--- traceback ---\n(?P<traceback>.*?)--- printed ---\n(?P<printed>.*?)--- end ---",
    re.DOTALL,
)


@dataclass(frozen=True)
class ConsoleEntry:
    """One console message, as it travels from a task to the driver."""

    operator_id: str
    log_time: datetime
    level: str
    message: str
    traceback: str = ""


class ConsoleParam(AccumulatorParam[list[ConsoleEntry]]):
    """Accumulates console entries: lists are concatenated."""

    def zero(self, value: list[ConsoleEntry]) -> list[ConsoleEntry]:
        return []

    def addInPlace(
        self, value1: list[ConsoleEntry], value2: list[ConsoleEntry]
    ) -> list[ConsoleEntry]:
        value1.extend(value2)
        return value1


def clip(text: str) -> str:
    return (
        text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "\n[cut at 64 KiB]"
    )


class OperatorFailure(Exception):
    """A user function raised; the message is what the driver parses (see FAILURE)."""

    def __init__(self, operator_id: str, error: str, trace: str, printed: str) -> None:
        super().__init__(
            f"[texera-operator {operator_id}] {error}\n--- traceback ---\n{trace}--- printed ---\n"
            f"{printed}--- end ---"
        )


@dataclass(frozen=True)
class ParsedFailure:
    operator_id: str
    error: str
    traceback: str
    printed: str


def parse_failure(text: str) -> ParsedFailure | None:
    """The operator failure carried by an error's text (a Spark error wraps it), if any."""
    match = _FAILURE.search(text)
    if match is None:
        return None
    return ParsedFailure(
        match["operator"], match["error"].strip(), match["traceback"], match["printed"].rstrip("\n")
    )


def _user_traceback(exc: BaseException, operator_id: str) -> str:
    """The traceback limited to frames of the user's code."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<udf {operator_id}>"
    ]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def conform(batch: Any, schema: pa.Schema) -> pa.RecordBatch:
    """A yielded batch with the output columns' names, cast safely to their types."""
    if not isinstance(batch, pa.RecordBatch):
        raise TypeError(f"the function must yield pyarrow.RecordBatch, not {type(batch).__name__}")
    if batch.schema.names != schema.names:
        raise ValueError(
            f"the function yielded columns {batch.schema.names}, the output columns are "
            f"{schema.names}"
        )
    return batch if batch.schema.equals(schema) else batch.cast(schema)


def run_udf(
    operator_id: str,
    code: str,
    function_name: str,
    output: pa.Schema,
    console: Accumulator[list[ConsoleEntry]],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function for a PythonUdf operator whose batches have the output schema."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        printed = io.StringIO()
        namespace: dict[str, Any] = {"__name__": f"udf_{operator_id}"}
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"<udf {operator_id}>", "exec"), namespace)  # noqa: S102 - user code by design
                for batch in namespace[function_name](batches):
                    yield conform(batch, output)
        except (Exception, SystemExit) as exc:
            # Free what the user's frames hold first: after a MemoryError the report
            # itself would otherwise find no memory left.
            traceback.clear_frames(exc.__traceback__)
            tail = "\n".join(printed.getvalue().splitlines()[-50:])
            raise OperatorFailure(
                operator_id,
                clip(f"{type(exc).__name__}: {exc}"),
                _user_traceback(exc, operator_id),
                tail + "\n",
            ) from None
        finally:
            now = datetime.now(UTC)
            lines = printed.getvalue().splitlines()
            entries = [
                ConsoleEntry(operator_id, now, "INFO", clip(line))
                for line in lines[:MAX_MESSAGES_PER_TASK]
            ]
            if len(lines) > MAX_MESSAGES_PER_TASK:
                dropped = len(lines) - MAX_MESSAGES_PER_TASK
                entries.append(
                    ConsoleEntry(
                        operator_id, now, "WARNING", f"{dropped} more printed lines were dropped"
                    )
                )
            if entries:
                console.add(entries)

    return run
