"""Computing units on a Spark standalone cluster against units in local mode, in one run.

A master and two workers (one core and 1 GiB each) start with the PySpark package's own
`spark-class` (embedded_stack.spark_cluster); one stack's units use that master
(TEXERA_LAKE_CU_SPARK_MASTER), the other's run Spark in their own JVM on two cores
(local[2]: as many task slots as the cluster has). On each, after the user's unit started and
the stack went quiet:

  (a) the small workflow of benchmarks.small_workflow (10 rows, range -> filter,
      materialized): submit -> SUCCEEDED -> first page, RUNS times after WARMUP; p50 and p95;
  (b) a workflow whose stages span both workers: ROWS rows of a range in 16 partitions,
      grouped by id % 1000 (a shuffle) and materialized, submit -> SUCCEEDED, median of
      WIDE_RUNS; on the cluster, the unit's application must hold a core of each worker.

It prints each, and cluster / local. The services record no spans, as by default.

Run: .venv/bin/python -m benchmarks.spark_cluster [--runs N] [--warmup N] [--rows N]
     [--wide-runs N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cu_write import UNIT_ENV
from benchmarks.shared import (
    UNLIMITED,
    UNTRACED,
    USER,
    Lake,
    lake,
    range_then,
    run_execution,
    settled,
)
from benchmarks.small_workflow import KEPT_ROWS, Client, percentile, seconds
from embedded_stack.spark_cluster import Cluster, standalone_cluster
from texera.lake.v1 import workflow_pb2

#: The wide workflow's groups: what GROUPED_QUERY makes of any range of at least as many rows.
GROUPS = 1000
GROUPED_QUERY = "SELECT id % 1000 AS g, count(*) AS c, sum(id) AS s FROM numbers GROUP BY id % 1000"


def wide_workflow(rows: int) -> workflow_pb2.Workflow:
    numbers = {"end": rows, "partitions": 16}
    return range_then("wide", numbers, "groups", {"sql_query": {"query": GROUPED_QUERY}})


@dataclass(frozen=True)
class Sizes:
    runs: int
    warmup: int
    rows: int
    wide_runs: int


@dataclass(frozen=True)
class Measured:
    """Seconds: the small workflow's runs and the wide workflow's runs."""

    small: list[float]
    wide: list[float]


def measure(measured: Lake, sizes: Sizes, check: Callable[[], None]) -> Measured:
    """Both workflows on a stack's unit, once the unit started and the stack is quiet; check()
    after each wide run."""
    client = Client(measured.stack, measured.warehouse.warehouse_id)
    seconds(client.run, KEPT_ROWS)  # the user's unit starts
    settled()
    for _ in range(sizes.warmup):
        seconds(client.run, KEPT_ROWS)
    small = [seconds(client.run, KEPT_ROWS) for _ in range(sizes.runs)]
    flow = wide_workflow(sizes.rows)
    wide = []
    for _ in range(sizes.wide_runs + 1):  # the first one untimed
        elapsed, final = run_execution(measured.stack, measured.warehouse.warehouse_id, flow)
        [output] = final.outputs
        if output.row_count != GROUPS:
            raise SystemExit(f"the wide workflow gave {output.row_count} rows, not {GROUPS}")
        check()
        wide.append(elapsed)
    return Measured(small, wide[1:])


def on_both_workers(cluster: Cluster, measured: Lake) -> Callable[[], None]:
    """A check that the user's unit holds a core of each of the cluster's workers."""

    def check() -> None:
        unit = measured.stack.unit_for(USER)
        cores = cluster.application_of(unit.unit_id)["cores"]
        used = [worker["coresused"] for worker in cluster.alive_workers()]
        if cores != 2 or used != [1, 1]:
            raise SystemExit(f"the unit's application has {cores} cores; workers use {used}")

    return check


def report(local: Measured, clustered: Measured, rows: int) -> None:
    def line(what: str, values: list[float], baseline: list[float]) -> None:
        p50, base = statistics.median(values), statistics.median(baseline)
        p95 = percentile(values, 0.95)
        print(f"    {what:<10} p50 {p50 * 1000:>7.0f} ms  p95 {p95 * 1000:>7.0f} ms", end="")
        print(f"  p50 / local p50 {p50 / base:5.2f}")

    print(f"(a) small workflow, submit -> SUCCEEDED -> first page, {len(local.small)} runs")
    line("local[2]", local.small, local.small)
    line("cluster", clustered.small, local.small)
    print(f"(b) {rows:,} rows grouped (a shuffle over 16 partitions), submit -> SUCCEEDED")
    line("local[2]", local.wide, local.wide)
    line("cluster", clustered.wide, local.wide)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--wide-runs", type=int, default=3)
    args = parser.parse_args()
    sizes = Sizes(args.runs, args.warmup, args.rows, args.wide_runs)
    print("local mode ...", flush=True)
    with lake({**UNLIMITED, **UNTRACED, **UNIT_ENV}) as local_lake:
        local = measure(local_lake, sizes, check=lambda: None)
    print("a standalone cluster ...", flush=True)
    with (
        tempfile.TemporaryDirectory() as logs,
        standalone_cluster(Path(logs)) as cluster,
        lake(
            {
                **UNLIMITED,
                **UNTRACED,
                "TEXERA_LAKE_CU_SPARK_MASTER": cluster.master_url,
                "TEXERA_LAKE_CU_SPARK_AUTH_SECRET_FILE": str(cluster.secret_file),
            }
        ) as cluster_lake,
    ):
        clustered = measure(cluster_lake, sizes, check=on_both_workers(cluster, cluster_lake))
    print()
    report(local, clustered, args.rows)


if __name__ == "__main__":
    main()
