"""An execution's runtime statistics and console messages, as Iceberg tables.

Both are buffered in memory and appended on a timer (one snapshot per table
per interval at most, and a last one when the execution ends), never one
snapshot per update. Appends retry short outages, exactly once each, like
commits of results (cu_service.writer.commit): a failed execution's messages
and statistics matter most. A statistics sample is written for an operator only when
something about it changed since the previous one.

A succeeding execution ends its telemetry in two steps (finish): the files of the
last appends are written side by side with the manifests of its last result
commit, and committed once that commit is made.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pyarrow as pa
from opentelemetry import trace
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.table import Table

from cu_service.parallel import in_parallel
from cu_service.workflow.udf import ConsoleEntry, clip
from cu_service.writer.commit import CommitMark, FreshTable, PreparedCommit, append_rows
from lake_tables.naming import CONSOLE_LOGS, RUNTIME_STATS, execution_table
from lake_tables.telemetry import CONSOLE_SCHEMA, STATS_SCHEMA
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

log = logging.getLogger("cu_service.telemetry")
tracer = trace.get_tracer("cu_service")


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
class _Outbox:
    """Rows gathered for one table, in batches numbered as their commits will be; a batch
    leaves only once committed, so a failed append is retried with the same rows and number
    (and is not committed twice if it had landed)."""

    next_sequence: int = 1
    batches: list[tuple[int, pa.Table]] = field(default_factory=list)

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows:
            self.batches.append((self.next_sequence, rows))
            self.next_sequence += 1


@dataclass
class Telemetry:
    catalog: Catalog
    execution_id: str
    table_properties: dict[str, str]
    interval_seconds: float
    #: How appends are retried through short outages of the catalog and storage.
    retry: RetryPolicy
    stats: dict[str, OperatorStats] = field(default_factory=dict)
    _console: list[ConsoleEntry] = field(default_factory=list)
    _written: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    _outboxes: dict[str, _Outbox] = field(
        default_factory=lambda: {RUNTIME_STATS: _Outbox(), CONSOLE_LOGS: _Outbox()}
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _created: threading.Event = field(default_factory=threading.Event)
    _failure: Exception | None = None
    #: The tables as created, for their first append.
    _fresh: dict[str, FreshTable] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    def _identifier(self, namespace: str) -> tuple[str, str]:
        return (namespace, execution_table(self.execution_id))

    def start(self) -> None:
        """Creates the two tables (their namespaces exist) on a thread of its own, which then
        flushes on the timer: the execution goes on meanwhile; opened() waits for them."""
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._open_and_flush,),
            name=f"telemetry-{self.execution_id}",
            daemon=True,
        )
        self._thread.start()

    def opened(self) -> None:
        """Waits until the tables exist; raises why they could not be created."""
        self._created.wait()
        if self._failure is not None:
            raise self._failure

    def _open_and_flush(self) -> None:
        try:
            with tracer.start_as_current_span("create telemetry tables"):
                in_parallel(
                    [
                        partial(self._create_table, RUNTIME_STATS, STATS_SCHEMA),
                        partial(self._create_table, CONSOLE_LOGS, CONSOLE_SCHEMA),
                    ]
                )
        except Exception as exc:
            self._failure = exc
            return
        finally:
            self._created.set()
        self._flush_on_timer()

    def _create_table(self, namespace: str, schema: pa.Schema) -> None:
        identifier = self._identifier(namespace)

        def create() -> Table | None:
            try:
                return self.catalog.create_table(
                    identifier, schema=schema, properties=self.table_properties
                )
            except TableAlreadyExistsError:
                return None  # a retried execution on this unit, or an answer that was lost

        table = retry_call(
            create, policy=self.retry, transient=transient_table_failure, what="create table"
        )
        if table is not None:
            self._fresh[namespace] = FreshTable(table, self.interval_seconds)

    def log(self, level: str, message: str, *, operator_id: str = "", traceback: str = "") -> None:
        self.console([_entry(level, message, operator_id, traceback)])

    def console(self, entries: list[ConsoleEntry]) -> None:
        with self._lock:
            self._console.extend(entries)

    def _flush_on_timer(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            self.flush()

    def flush(self) -> None:
        """Appends what gathered since the last flush, to both tables at once; what cannot be
        appended within the retry window is logged and kept for the next flush."""
        self._gather()
        in_parallel([partial(self._drain, namespace) for namespace in self._outboxes])

    def _drain(self, namespace: str) -> None:
        outbox = self._outboxes[namespace]
        try:
            while outbox.batches:
                sequence, rows = outbox.batches[0]
                self._append(namespace, sequence, rows)
                outbox.batches.pop(0)
        except Exception:
            log.exception(
                "could not append telemetry; keeping it for the next flush",
                extra={"execution_id": self.execution_id, "table": namespace},
            )

    def _gather(self) -> None:
        """Moves new console messages and changed statistics into the outboxes."""
        now = datetime.now(UTC)
        with self._lock:
            entries, self._console = self._console, []
            changed = [
                s for s in self.stats.values() if self._written.get(s.operator_id) != s.signature()
            ]
            for stats in changed:
                self._written[stats.operator_id] = stats.signature()
            samples = [self._sample(s, now) for s in changed]
        self._outboxes[RUNTIME_STATS].add(pa.Table.from_pylist(samples, STATS_SCHEMA))
        self._outboxes[CONSOLE_LOGS].add(_console_rows(entries))

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

    def _append(self, namespace: str, sequence: int, rows: pa.Table) -> None:
        self._commit(namespace, sequence, rows).make()

    def _commit(self, namespace: str, sequence: int, rows: pa.Table) -> PreparedCommit:
        fresh = self._fresh.pop(namespace, None)
        load = partial(self.catalog.load_table, self._identifier(namespace))  # fresh credentials
        return PreparedCommit(
            fresh.loader(load) if fresh else load,
            append_rows(rows),
            CommitMark(self.execution_id, sequence),
            self.retry,
        )

    def _stop_timer(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        """Stops the timer and writes what is left."""
        self._stop_timer()
        self.flush()

    def finish(self, message: str) -> Callable[[], None]:
        """Stops the timer and writes the files of what is left, with message (an INFO
        console message) added, without committing them; returns what commits them (and
        anything gathered since). Meant for a message that comes true only once something
        else is committed: if the returned call is never made, none of it is visible, and
        close() then writes what was left, without message."""
        self._stop_timer()
        self._gather()
        outboxes = self._outboxes
        if any(len(outbox.batches) > 1 for outbox in outboxes.values()):
            # An earlier append failed: its rows go first, one commit after another.
            return partial(self._log_and_flush, message)
        last: dict[str, tuple[int, pa.Table]] = {
            namespace: outbox.batches[0] for namespace, outbox in outboxes.items() if outbox.batches
        }
        console = outboxes[CONSOLE_LOGS]
        sequence, rows = last.get(CONSOLE_LOGS, (console.next_sequence, None))
        last[CONSOLE_LOGS] = (
            sequence,
            pa.concat_tables(
                [t for t in (rows, _console_rows([_entry("INFO", message)])) if t is not None]
            ),
        )
        commits = {name: self._commit(name, *batch) for name, batch in last.items()}
        try:
            in_parallel([commit.prepare for commit in commits.values()])
        except Exception:  # telemetry never fails an execution: appended later, one step each
            log.exception(
                "could not prepare the last telemetry", extra={"execution_id": self.execution_id}
            )
            return partial(self._log_and_flush, message)

        def commit_all() -> None:
            made = in_parallel(
                [
                    partial(self._commit_last, name, commit, last[name][0])
                    for name, commit in commits.items()
                ]
            )
            if all(made):  # else the catalog stayed away for a whole retry window already
                self.flush()

        return commit_all

    def _commit_last(self, namespace: str, commit: PreparedCommit, sequence: int) -> bool:
        try:
            commit.commit()
        except Exception:
            log.exception(
                "could not append telemetry",
                extra={"execution_id": self.execution_id, "table": namespace},
            )
            return False
        outbox = self._outboxes[namespace]
        outbox.batches.clear()
        outbox.next_sequence = sequence + 1
        return True

    def _log_and_flush(self, message: str) -> None:
        self.log("INFO", message)
        self.flush()


def _entry(level: str, message: str, operator_id: str = "", traceback: str = "") -> ConsoleEntry:
    return ConsoleEntry(operator_id, datetime.now(UTC), level, clip(message), traceback)


def _console_rows(entries: list[ConsoleEntry]) -> pa.Table:
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
    return pa.Table.from_pylist(rows, CONSOLE_SCHEMA)
