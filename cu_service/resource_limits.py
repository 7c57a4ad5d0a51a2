"""Limits an execution meets while it runs, and the failure that names the one it went over.

An execution over a limit fails alone with error reason RESOURCE_LIMIT and a
message naming the limit and its setting: its run time (the manager stops its
Spark jobs when the time is up), the bytes it writes (the writer stops), the
memory of a Python worker (a user's function gets MemoryError, or the worker
dies), the processes of a task (a user's function cannot fork or start a thread) and the
memory of the unit's JVM (Spark is set up so that a task's
OutOfMemoryError fails that task, not the JVM; see cu_service.spark).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from unit_launcher.unit_settings import ComputingUnitSettings

RESOURCE_LIMIT = "RESOURCE_LIMIT"
#: Marks the error of a write task that went over the execution's result bytes.
RESULT_BYTES_MARKER = "[texera-result-bytes-limit]"
_JVM_MEMORY = ("java.lang.OutOfMemoryError", "SparkOutOfMemoryError")
_SPARK_SIZE = ("COLLECTION_SIZE_LIMIT_EXCEEDED",)
_WORKER_CRASHED = "Python worker exited unexpectedly"
#: What a user's function meets when its task has all the processes it may have: fork(2)
#: fails with EAGAIN, or a thread cannot start.
_PROCESS_LIMIT = ("BlockingIOError: [Errno 11]", "can't start new thread")
#: Python's own MemoryError raised in a worker outside a user's function (not the JVM's).
_PYTHON_MEMORY = re.compile(r"\bMemoryError\b")


class ResourceLimitExceeded(Exception):
    """An execution went over one of the unit's limits; the message names it."""

    def __init__(self, message: str, operator_id: str = "") -> None:
        super().__init__(message)
        self.operator_id = operator_id


@dataclass(frozen=True)
class RunLimits:
    """The unit's limits on a running execution, and the failures that name them."""

    settings: ComputingUnitSettings

    @property
    def run_seconds(self) -> float:
        return self.settings.max_run_seconds

    @property
    def result_bytes(self) -> int:
        return self.settings.max_result_bytes

    def _limit(self, attribute: str, unit: str = "") -> str:
        value = getattr(self.settings, attribute)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        return f"{shown}{unit} (set by {self.settings.variable_of(attribute)})"

    def run_time_exceeded(self) -> str:
        return "the execution ran longer than its run time limit of " + self._limit(
            "max_run_seconds", " s"
        )

    def result_bytes_exceeded(self, written: int) -> ResourceLimitExceeded:
        return ResourceLimitExceeded(
            f"the execution wrote {written} bytes of results, over its limit of "
            + self._limit("max_result_bytes", " bytes")
        )

    def _worker_memory(self, operator_id: str, detail: str) -> ResourceLimitExceeded:
        who = f"operator {operator_id!r}" if operator_id else "a Python worker"
        return ResourceLimitExceeded(
            f"{who} went over the Python worker memory limit of "
            + self._limit("worker_memory_bytes", " bytes")
            + f": {detail}",
            operator_id,
        )

    def found_in(
        self, text: str, operator_id: str = "", error: str = ""
    ) -> ResourceLimitExceeded | None:
        """The limit a failed job's error text shows it went over, if any; operator_id and
        error are those of a user's function that failed (see udf.parse_failure)."""
        if error.startswith("MemoryError"):
            return self._worker_memory(operator_id, error)
        if any(marker in (error or text) for marker in _PROCESS_LIMIT):
            return self._processes(operator_id, error)
        if RESULT_BYTES_MARKER in text:
            return ResourceLimitExceeded(
                "a write task went over the execution's result limit of "
                + self._limit("max_result_bytes", " bytes")
            )
        return self._unit_limit_in(text, operator_id)

    def _processes(self, operator_id: str, error: str) -> ResourceLimitExceeded:
        who = f"operator {operator_id!r}" if operator_id else "a task"
        return ResourceLimitExceeded(
            f"{who} went over the process limit of "
            + self._limit("worker_processes", " processes and threads")
            + (f": {error}" if error else ""),
            operator_id,
        )

    def _unit_limit_in(self, text: str, operator_id: str) -> ResourceLimitExceeded | None:
        """The limit of the unit's JVM or workers that text shows a task went over."""
        if any(marker in text for marker in _JVM_MEMORY):
            return ResourceLimitExceeded(
                "a task ran out of the unit's Spark memory of " + self._limit("spark_driver_memory")
            )
        if any(marker in text for marker in _SPARK_SIZE):
            return ResourceLimitExceeded(
                "a task tried to build an array over Spark's array size limit"
            )
        if _WORKER_CRASHED in text or _PYTHON_MEMORY.search(text):
            return self._worker_memory(
                operator_id, "the worker ran out of memory or was ended at its memory limit"
            )
        return None
