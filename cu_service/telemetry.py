"""An execution's runtime statistics and console messages, as Iceberg tables.

Both are buffered in memory and appended on a timer (one snapshot per table
per interval at most, and a last one when the execution ends), never one
snapshot per update. A statistics sample is written for an operator only when
something about it changed since the previous one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import TableAlreadyExistsError

from cu_service.workflow.udf import ConsoleEntry, clip
from lake_tables.naming import CONSOLE_LOGS, EXECUTION_ID, RUNTIME_STATS, execution_table
from lake_tables.telemetry import CONSOLE_SCHEMA, STATS_SCHEMA

log = logging.getLogger("cu_service.telemetry")


@dataclass
class OperatorStats:
    """What is known of one operator while the execution runs; 0 where Spark does not say."""

    operator_id: str
    state: str = "PENDING"
    started: float | None = None
    ended: float | None = None
    input_rows: int = 0
    output_rows: int = 0
    input_bytes: int = 0
    output_bytes: int = 0

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()
        self.state, self.ended = "RUNNING", None

    def end(self, state: str) -> None:
        if self.state in ("PENDING", "RUNNING"):
            self.state = state
            self.ended = time.monotonic()

    def elapsed_ms(self) -> int:
        if self.started is None:
            return 0
        return int(((self.ended or time.monotonic()) - self.started) * 1000)

    def signature(self) -> tuple[Any, ...]:
        return (self.state, self.input_rows, self.output_rows, self.input_bytes, self.output_bytes)


@dataclass
class Telemetry:
    catalog: Catalog
    execution_id: str
    table_properties: dict[str, str]
    interval_seconds: float
    stats: dict[str, OperatorStats] = field(default_factory=dict)
    _console: list[ConsoleEntry] = field(default_factory=list)
    _written: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _identifier(self, namespace: str) -> tuple[str, str]:
        return (namespace, execution_table(self.execution_id))

    def open(self) -> None:
        """Creates the two tables and starts flushing on the timer."""
        for namespace, schema in ((RUNTIME_STATS, STATS_SCHEMA), (CONSOLE_LOGS, CONSOLE_SCHEMA)):
            with contextlib.suppress(TableAlreadyExistsError):  # a retried execution on this unit
                self.catalog.create_table(
                    self._identifier(namespace), schema=schema, properties=self.table_properties
                )
        self._thread = threading.Thread(
            target=self._flush_on_timer, name=f"telemetry-{self.execution_id}", daemon=True
        )
        self._thread.start()

    def log(self, level: str, message: str, *, operator_id: str = "", traceback: str = "") -> None:
        self.console(
            [ConsoleEntry(operator_id, datetime.now(UTC), level, clip(message), traceback)]
        )

    def console(self, entries: list[ConsoleEntry]) -> None:
        with self._lock:
            self._console.extend(entries)

    def _flush_on_timer(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            self.flush()

    def flush(self) -> None:
        """Appends what gathered since the last flush; a failure is logged and retried next time."""
        now = datetime.now(UTC)
        with self._lock:
            entries, self._console = self._console, []
            changed = [
                s for s in self.stats.values() if self._written.get(s.operator_id) != s.signature()
            ]
            samples = [(s.operator_id, s.signature(), self._sample(s, now)) for s in changed]
        try:
            if samples:
                self._append(
                    RUNTIME_STATS,
                    pa.Table.from_pylist([row for _, _, row in samples], STATS_SCHEMA),
                )
            if entries:
                rows = [
                    {
                        "operator_id": e.operator_id,
                        "log_time": e.log_time,
                        "level": e.level,
                        "message": e.message,
                        "traceback": e.traceback,
                    }
                    for e in entries
                ]
                self._append(CONSOLE_LOGS, pa.Table.from_pylist(rows, CONSOLE_SCHEMA))
        except Exception:
            log.exception("could not append telemetry; keeping it for the next flush")
            with self._lock:
                self._console = entries + self._console
            return
        with self._lock:
            for operator_id, signature, _ in samples:
                self._written[operator_id] = signature

    @staticmethod
    def _sample(stats: OperatorStats, now: datetime) -> dict[str, Any]:
        return {
            "operator_id": stats.operator_id,
            "sample_time": now,
            "state": stats.state,
            "input_rows": stats.input_rows,
            "output_rows": stats.output_rows,
            "input_bytes": stats.input_bytes,
            "output_bytes": stats.output_bytes,
            "elapsed_ms": stats.elapsed_ms(),
        }

    def _append(self, namespace: str, rows: pa.Table) -> None:
        table = self.catalog.load_table(self._identifier(namespace))  # fresh credentials
        table.append(rows, snapshot_properties={EXECUTION_ID: self.execution_id})

    def close(self) -> None:
        """Stops the timer and writes what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
