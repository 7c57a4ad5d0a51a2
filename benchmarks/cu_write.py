"""Write benchmark of the computing unit, all measured in one run on the embedded stack.

  (a) ours: submit an execution producing ROWS rows to the computing unit, until its output
      is committed (Spark tasks write Parquet to the bucket, the driver commits);
  (b) the floor: Spark (a session in this process) computing the same plan and writing it as
      plain Parquet files to the same bucket, with no table and no commit;
  (c) upstream Texera's pattern: one pyiceberg append and commit per 4,096 rows, through the
      same catalog into the same warehouse, on a slice of SLICE_ROWS rows, scaled linearly
      to ROWS (the per-commit cost grows as the table's metadata grows, so this flatters it).

(a) and (b) run RUNS times each, alternating, after one untimed warm-up of each; medians are
reported. Both get the same Spark: the unit is made with this machine's cores and
UNIT_MEMORY_MIB (UNIT_ENV), and the floor's session has as many cores and as much driver
memory. Targets: (a) <= 1.5 x (b), and (c) / (a) >= 20.

Run: .venv/bin/python -m benchmarks.cu_write [--rows N] [--slice-rows N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from benchmarks.parquet_floor import Bucket, write_plain_parquet
from benchmarks.shared import lake, plan, run_execution, user_catalog
from cu_service.spark import start_spark
from cu_service.workflow.compiler import WorkflowCompiler
from cu_service.workflow.file_roots import FileRoots
from cu_service.workflow.udf import ConsoleParam
from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from texera.lake.v1 import (
    execution_pb2,
    warehouse_pb2,
    workflow_pb2,
)
from unit_launcher.unit_settings import ComputingUnitSettings

UPSTREAM_BATCH = 4096
UNIT_CORES = os.cpu_count() or 1
UNIT_MEMORY_MIB = 2048
#: The registry's settings that size the unit measured in (a), as the floor's session is sized.
UNIT_ENV = {
    "TEXERA_LAKE_WAREHOUSE_UNIT_DEFAULT_CORES": str(UNIT_CORES),
    "TEXERA_LAKE_WAREHOUSE_UNIT_DEFAULT_MEMORY_MIB": str(UNIT_MEMORY_MIB),
}


def run_floor(
    spark: SparkSession, grant: BucketGrant, flow: workflow_pb2.Workflow, rows: int
) -> float:
    started = time.perf_counter()
    console = spark.sparkContext.accumulator([], ConsoleParam())
    compiled = WorkflowCompiler(
        spark.newSession(),
        console,
        lambda i, op: None,  # type: ignore[arg-type,return-value]
        FileRoots.from_setting(""),
    ).compile(flow)
    frame = compiled.frames[compiled.materialized[0]]
    prefix = f"floor/{uuid.uuid4().hex}"
    bucket = Bucket(
        grant.bucket,
        grant.region,
        grant.endpoint,
        grant.access_key.access_key_id,
        grant.access_key.secret_access_key,
    )
    written = frame.mapInArrow(
        lambda it: write_plain_parquet(bucket, prefix, it), "rows long"
    ).collect()
    elapsed = time.perf_counter() - started
    if sum(r.rows for r in written) != rows:
        raise SystemExit("the floor wrote another number of rows")
    return elapsed


def run_upstream(
    stack: Stack, warehouse: warehouse_pb2.Warehouse, slice_rows: int
) -> tuple[float, int]:
    catalog = user_catalog(stack, warehouse, "upstream")
    catalog.create_namespace_if_not_exists("upstream")
    schema = pa.schema(
        [("id", pa.int64()), ("bucket", pa.int64()), ("half", pa.float64()), ("label", pa.string())]
    )
    table = catalog.create_table(("upstream", f"t_{uuid.uuid4().hex[:8]}"), schema=schema)
    started = time.perf_counter()
    for start in range(0, slice_rows, UPSTREAM_BATCH):
        ids = list(range(start, min(start + UPSTREAM_BATCH, slice_rows)))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "bucket": [i % 97 for i in ids],
                    "half": [i * 0.5 for i in ids],
                    "label": [f"row-{i}" for i in ids],
                },
                schema=schema,
            )
        )
    return time.perf_counter() - started, len(table.snapshots())


@dataclass(frozen=True)
class WriteTimes:
    """Seconds to write the same plan through the unit (ours) and as plain Parquet (floor)."""

    rows: int
    ours: list[float]
    floor: list[float]
    final: execution_pb2.Execution

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.floor)


def write_times(
    stack: Stack, grant: BucketGrant, warehouse_id: str, rows: int, runs: int
) -> WriteTimes:
    """(a) and (b), alternately, runs times each after one warm-up of each; the stack's units
    must be sized by UNIT_ENV."""
    flow = plan(rows)
    spark = start_spark(
        ComputingUnitSettings(
            spark_master=f"local[{UNIT_CORES}]", spark_driver_memory=f"{UNIT_MEMORY_MIB}m"
        )
    )
    try:
        run_execution(stack, warehouse_id, flow)
        run_floor(spark, grant, flow, rows)
        ours, floor = [], []
        final = None
        for run in range(runs):
            elapsed, final = run_execution(stack, warehouse_id, flow)
            ours.append(elapsed)
            floor.append(run_floor(spark, grant, flow, rows))
            print(f"  run {run + 1}: ours {ours[-1]:.1f} s, floor {floor[-1]:.1f} s", flush=True)
    finally:
        spark.stop()
    assert final is not None
    return WriteTimes(rows, ours, floor, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--slice-rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with lake(UNIT_ENV) as running:
        stack, grant, warehouse = running.stack, running.grant, running.warehouse
        print(f"warming up with {args.rows:,} rows ...", flush=True)
        written = write_times(stack, grant, warehouse.warehouse_id, args.rows, args.runs)
        ours, floor = written.ours, written.floor
        [output] = written.final.outputs
        catalog = user_catalog(stack, warehouse, "check")
        table = catalog.load_table((output.namespace, output.table_name))
        assert output.row_count == args.rows
        print(f"upstream pattern on {args.slice_rows:,} rows ...", flush=True)
        upstream_slice, upstream_snapshots = run_upstream(stack, warehouse, args.slice_rows)

    a, b = statistics.median(ours), statistics.median(floor)
    c = upstream_slice * args.rows / args.slice_rows
    print()
    print(f"rows per execution                       {args.rows:>12,}")
    print(f"(a) ours, submit to committed (median)   {a:>10.1f} s")
    print(f"(b) Spark + plain Parquet (median)       {b:>10.1f} s")
    measured = f"(c) upstream, {args.slice_rows:,} rows measured"
    print(f"{measured:<40} {upstream_slice:>10.1f} s  ({upstream_snapshots} snapshots)")
    print(f"(c) upstream, scaled to {args.rows:,} rows  {c:>10.1f} s")
    print(f"(a) / (b)  = {a / b:5.2f}   target <= 1.5   {'met' if a / b <= 1.5 else 'NOT met'}")
    print(f"(c) / (a)  = {c / a:5.1f}   target >= 20    {'met' if c / a >= 20 else 'NOT met'}")
    print(
        f"ours: {output.file_count} data files, {len(table.snapshots())} snapshot(s) per output; "
        f"upstream: {upstream_snapshots} files and snapshots for {args.slice_rows:,} rows "
        f"({args.rows // UPSTREAM_BATCH + 1:,} at {args.rows:,})"
    )


if __name__ == "__main__":
    main()
