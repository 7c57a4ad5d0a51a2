"""A new unit warms its Spark up while no execution needs it.

A JVM runs Spark's code interpreted at first and compiles what runs often on
background threads; a small workflow on a new unit costs the JVM three times the
CPU it costs once those compilations are done (about seventy small runs later, see
docs/benchmarks.md), and on a machine of few cores that CPU is taken from the
execution itself. So a unit, once registered, runs WARM_UP_WORKFLOW a number of
times (TEXERA_LAKE_CU_WARM_UP_JOBS): compiled with the same checks as users'
workflows, then written by the same kind of job as an output, except that each
task encodes its rows as Parquet in memory and keeps nothing. It reads nothing
but a range, writes nowhere, holds no credential, and never runs while an
execution is queued, running or has been submitted within the last QUIET_SECONDS:
users come first, and a user who arrives in the middle of a warm-up waits at most
for one job of ten rows.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from cu_service.workflow.compiler import WorkflowCompiler
from cu_service.workflow.file_roots import FileRoots
from cu_service.workflow.udf import ConsoleParam
from cu_service.writer.files import FILES_ARROW
from cu_service.writer.output import WriteJob
from texera.lake.v1 import workflow_pb2

log = logging.getLogger("cu_service.warm_up")

_GROUP = "warm-up"
#: How long a unit must have had nothing to do before a warm-up job runs.
QUIET_SECONDS = 1.0
#: How long stopping waits for the job under way.
_LONGEST_JOB_SECONDS = 30.0

WARM_UP_WORKFLOW = workflow_pb2.Workflow(
    workflow_id="warm-up",
    operators=[
        workflow_pb2.Operator(operator_id="numbers", range_source=workflow_pb2.RangeSource(end=10)),
        workflow_pb2.Operator(
            operator_id="kept",
            input_operator_ids=["numbers"],
            filter=workflow_pb2.Filter(condition="id % 3 <> 1"),
        ),
        workflow_pb2.Operator(
            operator_id="rows",
            input_operator_ids=["kept"],
            projection=workflow_pb2.Projection(
                columns=[
                    workflow_pb2.ProjectedColumn(expression="id"),
                    workflow_pb2.ProjectedColumn(expression="id * 0.5", alias="half"),
                    workflow_pb2.ProjectedColumn(
                        expression="concat('row-', cast(id AS STRING))", alias="label"
                    ),
                ]
            ),
            materialize=True,
        ),
    ],
)


def encode_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A write task's work, in memory: the partition as one Parquet file, described by its
    size only, then dropped."""
    sink = pa.BufferOutputStream()
    writer: pq.ParquetWriter | None = None
    for batch in batches:
        writer = writer or pq.ParquetWriter(sink, batch.schema)
        writer.write_batch(batch)
    if writer is not None:
        writer.close()
    described = pickle.dumps({"file_size_in_bytes": sink.tell()})
    yield pa.RecordBatch.from_pydict({"file": [described]}, schema=FILES_ARROW)


def _no_tables(index: int, op: workflow_pb2.Operator) -> NoReturn:
    raise AssertionError("the warm-up workflow reads no table")


def run_once(spark: SparkSession) -> None:
    """One warm-up job: WARM_UP_WORKFLOW compiled on a session of its own, then written."""
    session = spark.newSession()
    console = spark.sparkContext.accumulator([], ConsoleParam())
    compiled = WorkflowCompiler(session, console, _no_tables, FileRoots.from_setting("")).compile(
        WARM_UP_WORKFLOW
    )
    job = WriteJob(compiled.frames[compiled.materialized[0]], encode_partition)
    job.run(range(job.partitions))


def warm_up_now(spark: SparkSession, jobs: int) -> None:
    """Runs jobs warm-up jobs at once (a pooled unit, which nothing waits for yet), on a
    thread of their own, which alone carries the warm-up's job group."""
    warm_up = WarmUp(spark, lambda: (0, 0, 0), jobs, quiet_seconds=0.0)
    warm_up.start()
    warm_up.join()


class WarmUp:
    """Runs `jobs` warm-up jobs on a thread of its own, each only once activity() (running,
    queued and submitted executions) has said (0, 0, n) for quiet_seconds."""

    def __init__(
        self,
        spark: SparkSession,
        activity: Callable[[], tuple[int, int, int]],
        jobs: int,
        quiet_seconds: float = QUIET_SECONDS,
    ) -> None:
        self._spark = spark
        self._activity = activity
        self._quiet_seconds = quiet_seconds
        self._jobs = jobs
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="warm-up", daemon=True)
        #: Jobs run so far.
        self.done = 0

    def start(self) -> None:
        if self._jobs > 0:
            self._thread.start()

    @property
    def running(self) -> bool:
        """Jobs are still to run (or one is under way)."""
        return self._thread.is_alive()

    def join(self) -> None:
        """Waits for every job to have run."""
        if self._thread.is_alive():
            self._thread.join()

    def stop(self) -> None:
        """Lets the job under way, if any, finish (a few tenths of a second), and no more."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(_LONGEST_JOB_SECONDS)

    def _run(self) -> None:
        context = self._spark.sparkContext
        context.setJobGroup(_GROUP, "warming the unit up")
        started = time.monotonic()
        seen: tuple[int, int, int] | None = None
        try:
            while self.done < self._jobs and not self._stopping.is_set():
                now = self._activity()
                if now[:2] != (0, 0) or now != seen:  # busy, or submitted to since last seen
                    seen = now
                    self._stopping.wait(self._quiet_seconds)
                    continue
                run_once(self._spark)
                self.done += 1
        except Exception:  # the unit works without it, only slower at first
            if not self._stopping.is_set():
                log.warning("warming up stopped after %d jobs", self.done, exc_info=True)
            return
        log.info("warmed up: %d jobs in %.1f s", self.done, time.monotonic() - started)
