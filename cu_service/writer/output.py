"""Writing one materialized output: Spark tasks write the files, the driver commits them.

The write runs as Spark jobs over waves of the output's partitions (four
partitions per task slot of the cluster). Each wave returns the files
its tasks wrote; the driver commits what has gathered once enough time or
bytes have passed, so a long write shows results as it goes without ever
committing per small batch, and a short one commits once. Each commit loads
the table again (which also renews the vended credentials used to write the
manifests) and survives short outages without committing a file twice (see
cu_service.writer.commit). The last commit is left to the caller, which writes
its manifests side by side with the execution's last telemetry.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from opentelemetry import trace
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.table import Table
from pyspark.sql import DataFrame

from cu_service import pyspark_private
from cu_service.execution_credentials import ExecutionCredentials
from cu_service.table_access import TableAccess
from cu_service.writer.commit import CommitMark, FreshTable, PreparedCommit, append_files
from cu_service.writer.files import FILES_SCHEMA, WriteSpec, write_partition
from cu_service.writer.table_schema import table_schema
from lake_tables.naming import RESULTS, result_table
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

log = logging.getLogger("cu_service.writer")
tracer = trace.get_tracer("cu_service")


@dataclass(frozen=True)
class WritePolicy:
    target_file_size: int
    commit_interval_seconds: float
    commit_max_bytes: int
    #: Bytes one execution may write across its outputs.
    max_result_bytes: int
    #: How catalog calls and commits are retried through short outages.
    retry: RetryPolicy


@dataclass
class WrittenOutput:
    """What one output's write produced so far: written, and of that, committed."""

    operator_id: str
    namespace: str
    table_name: str
    location: str = ""
    rows: int = 0
    files: int = 0
    bytes: int = 0
    committed_rows: int = 0
    committed_files: int = 0
    snapshot_id: int = 0
    commits: int = 0


class WriteJob:
    """A DataFrame's partitions, each given to write (a mapInArrow function yielding
    FILES_SCHEMA rows, one per file it wrote) in a Spark task; run() runs some of them as one
    Spark job and returns what their tasks yielded. The rows come back to the driver as the
    JVM pickled them: a task runs Python for write alone, in one Python worker."""

    def __init__(self, frame: DataFrame, write: Callable[[Iterator[pa.RecordBatch]], Any]) -> None:
        self._files = frame.mapInArrow(write, FILES_SCHEMA)
        self._rows = pyspark_private.pickled_rows(self._files)
        self.partitions: int = self._rows.getNumPartitions()

    def run(self, partitions: Iterable[int]) -> list[bytes]:
        rows = pyspark_private.collect_partitions(self._files, self._rows, list(partitions))
        return [bytes(row.file) for row in rows]


class OutputWriter:
    """Writes DataFrames as result tables of one execution."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        execution_id: str,
        table_properties: dict[str, str],
        policy: WritePolicy,
        on_progress: Callable[[WrittenOutput], None],
        check_cancelled: Callable[[], None],
        over_limit: Callable[[int], Exception],
        credentials: ExecutionCredentials,
    ) -> None:
        """over_limit: the error to raise once the bytes written pass the policy's limit;
        credentials: what the write tasks renew storage credentials with."""
        self._catalog = catalog
        self._execution_id = execution_id
        self._properties = table_properties
        self._policy = policy
        self._on_progress = on_progress
        self._check_cancelled = check_cancelled
        self._over_limit = over_limit
        self._credentials = credentials
        #: Bytes written so far across every output of this writer.
        self._written = 0

    def create(self, operator_id: str, frame: DataFrame, output: WrittenOutput) -> Table:
        """Creates the output's (empty) table and notes its location in output."""
        identifier = (RESULTS, result_table(self._execution_id, operator_id))
        schema = table_schema(frame.schema)
        properties = {**self._properties, "texera.operator-id": operator_id}
        attempts = 0

        def create() -> Table:
            nonlocal attempts
            attempts += 1
            try:
                return self._catalog.create_table(identifier, schema=schema, properties=properties)
            except TableAlreadyExistsError:
                if attempts == 1:
                    raise
                return self._catalog.load_table(identifier)  # created; its answer was lost

        with tracer.start_as_current_span("create table"):
            table = retry_call(
                create,
                policy=self._policy.retry,
                transient=transient_table_failure,
                what="create table",
            )
        output.location = table.location()
        return table

    def write(
        self, operator_id: str, frame: DataFrame, output: WrittenOutput, table: Table
    ) -> OutputCommit | None:
        """Fills the output's table, made by create(); output is updated as it goes. The
        files of the last waves are left to the commit returned (None if none are left),
        for the caller to prepare and make, maybe side by side with other work."""
        identifier = (RESULTS, result_table(self._execution_id, operator_id))
        spec = WriteSpec(
            access=TableAccess.of(table, self._credentials),
            operator_id=operator_id,
            data_location=f"{table.location()}/data/{self._execution_id}",
            target_file_size=self._policy.target_file_size,
            max_bytes=self._policy.max_result_bytes - self._written,
        )
        job = WriteJob(frame, partial(write_partition, spec))
        partitions = job.partitions
        # Several partitions per slot: a slow task idles fewer slots than in a wave of one each.
        wave = max(1, frame.sparkSession.sparkContext.defaultParallelism) * 4
        pending: list[dict[str, Any]] = []
        last_commit = time.monotonic()
        fresh = FreshTable(table, self._policy.commit_interval_seconds)
        for start in range(0, partitions, wave):
            self._check_cancelled()
            with tracer.start_as_current_span("spark job", attributes={"partitions.first": start}):
                written = job.run(range(start, min(start + wave, partitions)))
            described = [pickle.loads(entry) for entry in written]  # noqa: S301 - our own tasks' output
            pending += described
            output.rows += sum(int(d["record_count"]) for d in described)
            output.files += len(described)
            wave_bytes = sum(int(d["file_size_in_bytes"]) for d in described)
            output.bytes += wave_bytes
            self._written += wave_bytes
            self._on_progress(output)
            if self._written > self._policy.max_result_bytes:
                raise self._over_limit(self._written)
            pending_bytes = sum(int(d["file_size_in_bytes"]) for d in pending)
            due = time.monotonic() - last_commit >= self._policy.commit_interval_seconds
            if pending and (due or pending_bytes >= self._policy.commit_max_bytes):
                self._output_commit(identifier, pending, output, fresh).make()
                pending, last_commit = [], time.monotonic()
        return self._output_commit(identifier, pending, output, fresh) if pending else None

    def _output_commit(
        self,
        identifier: tuple[str, str],
        described: Iterable[dict[str, Any]],
        output: WrittenOutput,
        fresh: FreshTable,
    ) -> OutputCommit:
        entries = list(described)
        prepared = PreparedCommit(
            fresh.loader(lambda: self._catalog.load_table(identifier)),
            append_files(entries),
            CommitMark(self._execution_id, output.commits + 1),
            self._policy.retry,
        )
        return OutputCommit(prepared, entries, output, partial(self._on_progress, output))


@dataclass
class OutputCommit:
    """One commit of files of an output: prepare() writes its manifests, commit() makes it
    and counts it in the output."""

    prepared: PreparedCommit
    entries: list[dict[str, Any]]
    output: WrittenOutput
    on_committed: Callable[[], None]

    def prepare(self) -> None:
        with tracer.start_as_current_span(
            "prepare commit", attributes={"files": len(self.entries)}
        ):
            self.prepared.prepare()

    def make(self) -> None:
        """Both steps, one after the other."""
        self.prepare()
        self.commit()

    def commit(self) -> None:
        with tracer.start_as_current_span("commit", attributes={"files": len(self.entries)}):
            table = self.prepared.commit()
        output = self.output
        snapshot = table.current_snapshot()
        output.snapshot_id = snapshot.snapshot_id if snapshot else 0
        output.commits += 1
        output.committed_rows += sum(int(entry["record_count"]) for entry in self.entries)
        output.committed_files += len(self.entries)
        log.info(
            "committed",
            extra={
                "table": ".".join(table.name()),
                "files": len(self.entries),
                "snapshot_id": output.snapshot_id,
            },
        )
        self.on_committed()
