"""What an execution's run needs, made at submission: a Spark session of its own, its console,
and its workflow compiled on that session (which also checks it against the unit's limits).

Everything here calls into the JVM, so it runs on a thread, never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame, SparkSession

from cu_service.source_tables import SourceTables
from cu_service.spark import shuffle_partitions
from cu_service.submission import check_queries
from cu_service.workflow.compiler import CompiledWorkflow, OperatorProblem, WorkflowCompiler
from cu_service.workflow.file_roots import FileRoots
from cu_service.workflow.iceberg_source import read_table
from cu_service.workflow.limits import WorkflowLimits
from cu_service.workflow.udf import ConsoleEntry, ConsoleParam
from texera.lake.v1 import workflow_pb2


@dataclass
class Prepared:
    """What a run needs; held by the run alone, so that it goes (JVM objects included) with it."""

    session: SparkSession
    catalog: Catalog
    compiled: CompiledWorkflow
    console: Accumulator[list[ConsoleEntry]]


@dataclass(frozen=True)
class Preparation:
    """Prepares executions on a unit's Spark, within its limits."""

    spark: SparkSession
    file_roots: FileRoots
    limits: WorkflowLimits

    def __call__(
        self, catalog: Catalog, tables: SourceTables, workflow: workflow_pb2.Workflow
    ) -> Prepared:
        session = self.spark.newSession()
        session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(self.spark)))
        console = self.spark.sparkContext.accumulator([], ConsoleParam())

        def read_iceberg(index: int, op: workflow_pb2.Operator) -> DataFrame:
            try:
                return read_table(
                    session, catalog, tables[op.operator_id], op.iceberg_table_source.snapshot_id
                )
            except NoSuchTableError as exc:
                raise OperatorProblem(
                    f"no table {'.'.join(tables[op.operator_id])} in this warehouse"
                ) from exc

        compiled = WorkflowCompiler(session, console, read_iceberg, self.file_roots).compile(
            workflow
        )
        check_queries(workflow, compiled, self.limits)
        return Prepared(session=session, catalog=catalog, compiled=compiled, console=console)
