"""Reading an Iceberg table of the execution's warehouse as a Spark DataFrame.

The driver plans the scan (which data files, with which deletes) through the
catalog; each file becomes one Spark partition, read on an executor with the
table's vended credentials (lake_tables.scan_tasks), so the read is parallel by
data file, deletes and schema evolution are honoured, and every null is kept.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from cu_service.spark import arrow_schema
from cu_service.table_access import TableAccess
from lake_tables.scan_tasks import read_task


@dataclass(frozen=True)
class ScanSpec:
    access: TableAccess
    #: The Iceberg schema the scan reads (the snapshot's), as JSON.
    projected_schema_json: str
    #: The Arrow schema Spark expects of each batch.
    arrow_schema: pa.Schema


def read_tasks(spec: ScanSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: each input row is a pickled scan task of one data file."""
    metadata = spec.access.metadata()
    projected = Schema.model_validate_json(spec.projected_schema_json)
    io = spec.access.file_io(metadata.location)
    for batch in batches:
        for task_bytes in batch.column("task").to_pylist():
            task = pickle.loads(task_bytes)  # noqa: S301 - planned by our own driver
            for read in read_task(io.get(), metadata, projected, task):
                yield read.cast(spec.arrow_schema)


def read_table(
    session: SparkSession, catalog: Catalog, identifier: tuple[str, ...], snapshot_id: int
) -> DataFrame:
    """The table (at snapshot_id, or its current snapshot for 0) as a DataFrame."""
    table = catalog.load_table(identifier)
    scan = table.scan(snapshot_id=snapshot_id or None)
    tasks = [pickle.dumps(task) for task in scan.plan_files()]
    spark_schema = from_arrow_schema(schema_to_pyarrow(scan.projection()))
    spec = ScanSpec(
        TableAccess.of(table),
        scan.projection().model_dump_json(),
        arrow_schema(spark_schema),
    )
    rows = session.sparkContext.parallelize([(task,) for task in tasks], max(len(tasks), 1))
    planned = session.createDataFrame(rows, "task binary")
    return planned.mapInArrow(partial(read_tasks, spec), spark_schema)
