"""Long Spark jobs under the driver JVM's JIT settings: the JVM's defaults, the unit's
(cu_service.spark.LATE_OPTIMIZATION) and C1 alone (-XX:TieredStopAtLevel=1).

Each setting gets a JVM of its own (a child process of this one starting Spark in local[1], as
a one-core unit runs its tasks in its driver JVM), one after another; each runs QUERIES, CPU-bound
jobs of a few seconds, RUNS times in turn. Printed for each job and setting: the first run
(compiled code still being made) and the median of the others, and each as a ratio to the JVM's
defaults. The small workflow's side, what the JVM spends on a short execution, is in
benchmarks.execution_cpu (--unit-java-options). Nothing is asserted.

Run: .venv/bin/python -m benchmarks.jit_thresholds [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from pyspark.sql import SparkSession

from cu_service.spark import LATE_OPTIMIZATION

#: The settings compared, by name: the JVM options each JVM is started with.
SETTINGS = {
    "JVM defaults": "",
    "unit's": " ".join(LATE_OPTIMIZATION),
    "C1 only": "-XX:TieredStopAtLevel=1",
}
BASELINE = "JVM defaults"


def queries(spark: SparkSession) -> dict[str, Callable[[], object]]:
    """Jobs whose time is the JVM's compiled code: an aggregation, a join, string functions."""
    return {
        "group 40M rows": lambda: (
            spark.range(40_000_000)
            .selectExpr("id % 1000 as k", "id * 3 as v")
            .groupBy("k")
            .agg({"v": "sum", "k": "count"})
            .collect()
        ),
        "join 8M rows": lambda: (
            spark.range(8_000_000)
            .selectExpr("id % 100000 as k", "id as v")
            .join(spark.range(100_000).withColumnRenamed("id", "k"), "k")
            .selectExpr("sum(v)")
            .collect()
        ),
        "strings 5M rows": lambda: (
            spark.range(5_000_000)
            .selectExpr("concat('row-', cast(id as string)) as s")
            .selectExpr("sum(length(upper(s)))")
            .collect()
        ),
    }


def run_one(options: str, runs: int) -> dict[str, list[float]]:
    """Seconds of each run of each query, in a Spark started here with options."""
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.extraJavaOptions", options)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    times: dict[str, list[float]] = {}
    try:
        for name, query in queries(spark).items():
            for _ in range(runs):
                started = time.perf_counter()
                query()
                times.setdefault(name, []).append(time.perf_counter() - started)
    finally:
        spark.stop()
    return times


def in_child(options: str, runs: int) -> dict[str, list[float]]:
    """run_one in a new process: a JVM's options are set when it starts."""
    done = subprocess.run(
        [sys.executable, "-m", __spec__.name, f"--child={options}", f"--runs={runs}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"the JVM with {options or 'no options'} failed:\n{done.stderr[-2000:]}")
    times: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return times


def report(measured: dict[str, dict[str, list[float]]]) -> None:
    print(
        f"{'job':<17}{'setting':<14}{'first':>9}{'then':>9}{'first / base':>14}{'then / base':>13}"
    )
    base = measured[BASELINE]
    for job, baseline in base.items():
        for setting, times in measured.items():
            first, then = times[job][0], statistics.median(times[job][1:])
            print(
                f"{job:<17}{setting:<14}{first:8.2f}s{then:8.2f}s"
                f"{first / baseline[0]:14.2f}{then / statistics.median(baseline[1:]):13.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs of each job (2 at least)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(run_one(args.child, args.runs)))
        return
    runs = max(2, args.runs)
    measured = {}
    for setting, options in SETTINGS.items():
        print(f"{setting}: {options or '(none)'} ...", flush=True)
        measured[setting] = in_child(options, runs)
    report(measured)


if __name__ == "__main__":
    main()
