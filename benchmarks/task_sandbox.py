"""What running every task in a sandbox of its own costs: small Spark jobs whose tasks go
through a Python worker, on a unit's Spark with its tasks sandboxed and on the same Spark
without (TEXERA_LAKE_CU_SANDBOX_TASKS), in turns, each in a process of its own (one Spark a
process). Prints the median time of a job in each and their ratio; nothing is asserted.

Run: .venv/bin/python -m benchmarks.task_sandbox [--jobs N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

#: Tasks per job: one per partition, run side by side on local[2].
PARTITIONS = 2


def _identity(batches: Iterator[object]) -> Iterator[object]:
    yield from batches


def job_times(sandboxed: bool, jobs: int) -> list[float]:
    """Seconds each of jobs small jobs took, after three to warm up (in this process)."""
    from cu_service.spark import start_spark  # noqa: PLC0415
    from unit_launcher.unit_settings import ComputingUnitSettings  # noqa: PLC0415 - only in the child

    settings = ComputingUnitSettings(
        spark_master=f"local[{PARTITIONS}]", spark_driver_memory="1g", sandbox_tasks=sandboxed
    )
    spark = start_spark(settings)
    try:

        def one() -> float:
            started = time.perf_counter()
            frame = spark.range(10, numPartitions=PARTITIONS).mapInArrow(_identity, "id long")
            frame.collect()
            return time.perf_counter() - started

        for _ in range(3):
            one()
        return [one() for _ in range(jobs)]
    finally:
        spark.stop()


def _in_a_process(sandboxed: bool, jobs: int) -> list[float]:
    code = (
        "import json, sys; from benchmarks.task_sandbox import job_times; "
        f"print(json.dumps(job_times({sandboxed}, {jobs})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=900
    )
    times: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs measured per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each way, in turns")
    arguments = parser.parse_args()
    sandboxed: list[float] = []
    plain: list[float] = []
    for round_ in range(arguments.rounds):
        sandboxed += _in_a_process(True, arguments.jobs)
        plain += _in_a_process(False, arguments.jobs)
        print(f"round {round_ + 1} done", flush=True)
    with_sandbox, without = statistics.median(sandboxed), statistics.median(plain)
    print(f"a job of {PARTITIONS} Python tasks, sandboxed (median)   {with_sandbox * 1000:.1f} ms")
    print(f"the same, tasks not sandboxed (median)       {without * 1000:.1f} ms")
    print(f"sandboxed / not sandboxed = {with_sandbox / without:.2f}")


if __name__ == "__main__":
    main()
