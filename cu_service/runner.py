"""Running one execution to its end, on a thread of its own (Spark calls block).

It writes each materialized output in order, keeps the operators' statistics
and console messages, and reports progress and the final state through its
Reporter. If anything fails or the execution is cancelled, every result table
it created is dropped with its files (committed or not), so no partial result
stays visible; statistics and console messages stay, to explain what happened.
(The registry's cleaner makes sure of it later, also for a unit that died.)
A failure caused by one of the unit's limits (run time, result bytes, memory)
is reported as RESOURCE_LIMIT naming the limit (see cu_service.resource_limits).
Its jobs go to the FAIR scheduler pool it was given, its submitter's.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

import requests
from opentelemetry import trace
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, RESTError
from pyiceberg.table import Table
from pyspark.accumulators import Accumulator
from pyspark.sql import SparkSession

from cu_service.execution_credentials import ExecutionCredentials
from cu_service.namespaces import ensure_namespaces
from cu_service.parallel import in_parallel
from cu_service.resource_limits import RESOURCE_LIMIT, ResourceLimitExceeded, RunLimits
from cu_service.telemetry import OperatorStats, Telemetry
from cu_service.workflow.compiler import CompiledWorkflow
from cu_service.workflow.file_roots import OutsideRoots
from cu_service.workflow.udf import ConsoleEntry, OperatorFailure, ParsedFailure, parse_failure
from cu_service.writer.output import OutputCommit, OutputWriter, WritePolicy, WrittenOutput
from lake_tables.naming import RESULTS, result_table
from lake_tables.transient import sql_database_unreachable
from lake_tables.uncommitted import data_folder, delete_folder
from service_runtime.redaction import without_credentials
from texera.lake.v1 import execution_pb2

log = logging.getLogger("cu_service.runner")
tracer = trace.get_tracer("cu_service")


class Reporter(Protocol):
    """Where a run reports to (the execution manager); called from the run's thread."""

    def running(self) -> None: ...

    def progress(self, outputs: list[WrittenOutput]) -> None: ...

    def finished(
        self,
        state: execution_pb2.ExecutionState.ValueType,
        error: execution_pb2.ExecutionError | None,
    ) -> None: ...


class Cancelled(Exception):
    """The execution was asked to stop."""


@dataclass
class ExecutionRun:
    execution_id: str
    group: str
    session: SparkSession
    catalog: Catalog
    compiled: CompiledWorkflow
    console: Accumulator[list[ConsoleEntry]]
    telemetry: Telemetry
    policy: WritePolicy
    table_properties: dict[str, str]
    reporter: Reporter
    cancel_reason: Callable[[], str | None]
    #: Why the manager stopped the run at its time limit, once it has.
    time_limit_reason: Callable[[], str | None]
    limits: RunLimits
    #: The FAIR scheduler pool its jobs go to, its submitter's (see cu_service.slot_fairness).
    pool: str
    #: What its write tasks renew storage credentials with (no catalog token).
    credentials: ExecutionCredentials
    outputs: dict[str, WrittenOutput] = field(default_factory=dict)
    #: The materialized operator being written, named by failures that are no one else's.
    writing: str = ""

    def __call__(self) -> None:
        context = self.session.sparkContext
        context.setJobGroup(self.group, f"execution {self.execution_id}", interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", self.pool)
        for operator_id in self.compiled.order:
            facts = self.compiled.source_facts.get(operator_id)
            stats = OperatorStats(operator_id)
            if facts:
                stats.input_rows = stats.output_rows = facts.rows
                stats.input_bytes = facts.bytes
            self.telemetry.stats[operator_id] = stats
        try:
            writer = self._writer()
            with tracer.start_as_current_span("create tables"):
                tables = self._create_tables(writer)
            self.reporter.running()
            # Reported after RUNNING, which the registry must hear first: the outputs are
            # listed from now on, even one that ends with no rows.
            self.reporter.progress(list(self.outputs.values()))
            self._recheck_files()
            last = self._write_outputs(writer, tables)
            self.telemetry.opened()
            commit_telemetry = self._make_last_commit(last)
        except BaseException as exc:
            self._fail(exc)
        else:
            self._close_telemetry(commit_telemetry)
            self.reporter.finished(execution_pb2.EXECUTION_STATE_SUCCEEDED, None)
        finally:
            context.setJobGroup("", "")
            context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]

    def _recheck_files(self) -> None:
        """The files sources read are still the real files they were at submission."""
        for operator_id, files in self.compiled.files.items():
            try:
                files.recheck()
            except OutsideRoots as exc:
                raise OperatorFailure(operator_id, f"file source: {exc}", "", "") from exc

    def _writer(self) -> OutputWriter:
        return OutputWriter(
            catalog=self.catalog,
            execution_id=self.execution_id,
            table_properties=self.table_properties,
            policy=self.policy,
            on_progress=self._progress,
            check_cancelled=self._check_cancelled,
            over_limit=self.limits.result_bytes_exceeded,
            credentials=self.credentials,
        )

    def _create_tables(self, writer: OutputWriter) -> dict[str, Table]:
        """Creates the namespaces (once per catalog client), then the result tables side by
        side (each is a few round trips to the catalog; they are listed as outputs first, so
        that a failure drops the ones made), then starts creating the telemetry tables in the
        background: they are first needed after the outputs are written, and made meanwhile
        they do not hold up the result tables the write waits for."""
        ensure_namespaces(self.catalog, self.policy.retry)
        materialized = self.compiled.materialized
        for operator_id in materialized:
            self.outputs[operator_id] = WrittenOutput(
                operator_id, RESULTS, result_table(self.execution_id, operator_id)
            )
        try:
            made = in_parallel(
                [
                    partial(writer.create, o, self.compiled.frames[o], self.outputs[o])
                    for o in materialized
                ]
            )
        finally:
            self.telemetry.start()
        return dict(zip(materialized, made, strict=True))

    def _make_last_commit(self, last: OutputCommit | None) -> Callable[[], None]:
        """Makes the last commit of results, its manifests written side by side with the files
        of the last telemetry (which says the execution succeeded); returns what commits
        that telemetry, which is true once this commit is made."""
        message = f"execution {self.execution_id} succeeded"
        finished: list[Callable[[], None]] = []

        def finish_telemetry() -> None:
            finished.append(self.telemetry.finish(message))

        with tracer.start_as_current_span("prepare last commits"):
            in_parallel([finish_telemetry, *([last.prepare] if last else [])])
        if last is not None:
            last.commit()
        return finished[0]

    def _write_outputs(self, writer: OutputWriter, tables: dict[str, Table]) -> OutputCommit | None:
        """Writes every output and makes their commits, but for the last one of the last
        output, which it returns (None if there is none to make)."""
        materialized = self.compiled.materialized
        last: OutputCommit | None = None
        for operator_id in materialized:
            self._check_cancelled()
            self.writing = operator_id
            for involved in self._lineage(operator_id):
                self.telemetry.stats[involved].start()
            output = self.outputs[operator_id]
            with tracer.start_as_current_span(
                "write output", attributes={"operator.id": operator_id}
            ):
                last = writer.write(
                    operator_id, self.compiled.frames[operator_id], output, tables[operator_id]
                )
                if last is not None and operator_id != materialized[-1]:
                    last.make()
                    last = None
            for involved in self._lineage(operator_id):
                self.telemetry.stats[involved].end("COMPLETED")
            self._collect_console()
            self._count_inputs()
            stats = self.telemetry.stats[operator_id]
            stats.output_rows, stats.output_bytes = output.rows, output.bytes
            commits = output.commits + (last is not None)
            self.telemetry.log(
                "INFO",
                f"operator {operator_id}: {output.rows} rows in {output.files} files, {commits} commit(s)",
                operator_id=operator_id,
            )
        return last

    def _check_cancelled(self) -> None:
        if (reason := self.cancel_reason() or self.time_limit_reason()) is not None:
            raise Cancelled(reason)

    def _count_inputs(self) -> None:
        """An operator read what its inputs produced, where that is known."""
        stats = self.telemetry.stats
        for operator_id, inputs in self.compiled.inputs.items():
            if inputs and all(stats[i].output_rows for i in inputs):
                stats[operator_id].input_rows = sum(stats[i].output_rows for i in inputs)

    def _lineage(self, operator_id: str) -> list[str]:
        """The operator and every operator it reads from, directly or not."""
        found, pending = [], [operator_id]
        while pending:
            current = pending.pop()
            if current not in found:
                found.append(current)
                pending += self.compiled.inputs.get(current, [])
        return found

    def _progress(self, output: WrittenOutput) -> None:
        self.reporter.progress(list(self.outputs.values()))

    def _collect_console(self) -> None:
        entries = list(self.console.value)
        self.console.value = []
        if entries:
            self.telemetry.console(entries)

    def _fail(self, exc: BaseException) -> None:
        self._collect_console()
        cancelled = self.cancel_reason()
        failure = parse_failure(str(exc))
        if failure is not None and failure.printed:
            self.telemetry.console(
                [
                    ConsoleEntry(failure.operator_id, datetime.now(UTC), "INFO", line)
                    for line in failure.printed.splitlines()
                ]
            )
        limit = self._limit_exceeded(exc, failure)
        state = execution_pb2.EXECUTION_STATE_FAILED
        if limit is not None:
            error = execution_pb2.ExecutionError(
                reason=RESOURCE_LIMIT, message=str(limit), operator_id=limit.operator_id
            )
            self.telemetry.log("ERROR", error.message, operator_id=limit.operator_id)
        elif cancelled is not None:
            state = execution_pb2.EXECUTION_STATE_CANCELLED
            error = execution_pb2.ExecutionError(
                reason="CANCELLED_BY_USER", message=cancelled or "cancelled"
            )
            self.telemetry.log("WARNING", f"execution cancelled: {error.message}")
        elif failure is not None:
            error = execution_pb2.ExecutionError(
                reason="OPERATOR_FAILED", message=failure.error, operator_id=failure.operator_id
            )
            self.telemetry.log(
                "ERROR", failure.error, operator_id=failure.operator_id, traceback=failure.traceback
            )
        else:
            error = execution_pb2.ExecutionError(
                reason=_reason(exc), message=_summary(exc), operator_id=self.writing
            )
            log.error("execution failed", exc_info=exc, extra={"execution_id": self.execution_id})
            self.telemetry.log(
                "ERROR", error.message, traceback="".join(traceback.format_exception(exc))
            )
        for stats in self.telemetry.stats.values():
            stats.end(
                "CANCELLED" if cancelled is not None or stats.state == "PENDING" else "FAILED"
            )
        self._drop_results()
        self._close_telemetry()
        self.reporter.finished(state, error)

    def _limit_exceeded(
        self, exc: BaseException, failure: ParsedFailure | None
    ) -> ResourceLimitExceeded | None:
        """The limit the run went over, if that is why it failed. Its run time is known
        first; a cancelled run's errors (killed workers, say) say nothing of limits."""
        if (message := self.time_limit_reason()) is not None:
            return ResourceLimitExceeded(message)
        if self.cancel_reason() is not None:
            return None
        if isinstance(exc, ResourceLimitExceeded):
            return exc
        if failure is not None:
            return self.limits.found_in(str(exc), failure.operator_id, failure.error)
        # A worker ended from outside (its memory limit) leaves no Python error naming its
        # operator: the output being written when it died is the one it computed.
        return self.limits.found_in(str(exc), self.writing)

    def _drop_results(self) -> None:
        """Drops every result table this run created, and files left under their data folders."""
        for output in self.outputs.values():
            identifier = (output.namespace, output.table_name)
            try:
                table = self.catalog.load_table(identifier)
                properties = dict(table.io.properties)
                self.catalog.purge_table(identifier)
                delete_folder(properties, data_folder(output.location, self.execution_id))
            except NoSuchTableError:
                pass
            except Exception:  # best effort: the execution's state matters more
                log.exception(
                    "could not clean up a result table", extra={"table": ".".join(identifier)}
                )
            output.rows = output.files = output.bytes = output.snapshot_id = 0
            output.committed_rows = output.committed_files = 0

    def _close_telemetry(self, commit: Callable[[], None] | None = None) -> None:
        """Writes the last telemetry: commits what was prepared, or else what is left."""
        try:
            with tracer.start_as_current_span("write telemetry"):
                (commit or self.telemetry.close)()
        except Exception:
            log.exception(
                "could not write the last telemetry", extra={"execution_id": self.execution_id}
            )


def _reason(exc: BaseException) -> str:
    """The machine-readable cause of a failure that is not an operator's."""
    if isinstance(exc, RESTError | requests.RequestException) or sql_database_unreachable(exc):
        return "CATALOG_UNAVAILABLE"  # the REST catalog, or the SQL catalog's database
    if isinstance(exc, OSError):  # pyarrow's storage errors
        return "STORAGE_UNAVAILABLE"
    return "EXECUTION_FAILED"


def _summary(exc: BaseException) -> str:
    """One line about a failure, at most 1,000 characters and without credentials or Java
    stack traces: for the catalog's error, the type and message of its answer (pyiceberg's
    exception carries those of the Iceberg REST error body); for a failure in a Python
    worker, the Python exception and its message."""
    return without_credentials(_first_line(exc))[:1000]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, RESTError):
        answer = " ".join(text.split()) or "no message"
        return f"the catalog answered with an error ({type(exc).__name__}): {answer}"
    if (python := _python_exception(text)) is not None:
        return python
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("at ", "An error occurred while calling")) and line != ":":
            # A task's failure: Spark's "Job aborted ... Lost task ..." before the error itself.
            found = _SPARK_ERROR_CLASS.search(line)
            return line[found.start() if found else 0 :]
    return type(exc).__name__


#: Where Spark's own message starts: its error class, as in ``[CAST_INVALID_INPUT] ...``.
_SPARK_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*\] ")


def _python_exception(text: str) -> str | None:
    """The exception line (type: message) of the first Python traceback in a Spark error."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.rstrip().endswith("Traceback (most recent call last):"):
            for following in lines[index + 1 :]:
                if following.strip() and not following.startswith((" ", "\t")):
                    return following.strip()
    return None
