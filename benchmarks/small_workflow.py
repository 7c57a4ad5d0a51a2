"""Interactive latency of a small workflow, measured in one run on the embedded stack.

  (a) ours: a 10-row workflow (range -> filter, materialized) through the gateway on a warm
      computing unit: SubmitExecution, WatchExecution until SUCCEEDED, then ReadResultPage of
      its first page, RUNS times after WARMUP untimed runs; p50 and p95. The first execution
      starts the user's unit, which then warms up while idle (TEXERA_LAKE_CU_WARM_UP_JOBS);
      the benchmark waits for the stack to go quiet before the runs it measures;
  (b) the floor: the same computation in Spark in this process,
      `spark.range(10).filter("id % 2 = 0").collect()`, measured first; p50.

The ratio (a) p50 / (b) p50 is what the mesh costs beyond Spark's own job. The goal is
(a) p50 <= 0.5 s on a 2-core machine. The services write their spans to their logs
(TEXERA_LAKE_TRACE_CONSOLE), and the benchmark prints the trace of one more execution, each
span with its start and duration.

Run: .venv/bin/python -m benchmarks.small_workflow [--runs N] [--warmup N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pyspark.sql import SparkSession

from benchmarks.shared import UNLIMITED, ExecutionFailed, lake, metadata, range_then, settled
from benchmarks.traces import spans_of, tree_lines
from cu_service.spark import start_spark
from embedded_stack.stack import Stack
from service_runtime.tracing import JsonLinesExporter, trace_metadata
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_service_pb2,
    result_service_pb2_grpc,
)
from unit_launcher.unit_settings import ComputingUnitSettings

ROWS = 10
CONDITION = "id % 2 = 0"
WORKFLOW = range_then("small", {"end": ROWS}, "even", {"filter": {"condition": CONDITION}})
#: The rows CONDITION keeps of the range: what the first page and the floor must hold.
KEPT_ROWS = len([i for i in range(ROWS) if i % 2 == 0])


class Client:
    """The user's calls through the gateway: submit, watch to the end, read the first page.
    The user is the benchmark's USER unless user (the metadata a user presents) is given."""

    def __init__(
        self, stack: Stack, warehouse_id: str, user: tuple[tuple[str, str], ...] = ()
    ) -> None:
        channel = stack.channel("gateway", presenting=None)
        self._executions = execution_service_pb2_grpc.ExecutionServiceStub(channel)
        self._results = result_service_pb2_grpc.ResultServiceStub(channel)
        self._user = user or metadata(stack, "gateway")
        self._warehouse_id = warehouse_id

    def run(self) -> int:
        """One execution to its first page; the number of rows on it."""
        # The trace context of the caller's current span, if any, goes along.
        calls = (*self._user, *trace_metadata())
        submitted = self._executions.SubmitExecution(
            execution_service_pb2.SubmitExecutionRequest(
                warehouse_id=self._warehouse_id, workflow=WORKFLOW
            ),
            metadata=calls,
            timeout=120,
        ).execution
        final = submitted
        watch = execution_service_pb2.WatchExecutionRequest(execution_id=submitted.execution_id)
        for event in self._executions.WatchExecution(watch, metadata=calls, timeout=120):
            final = event.execution
        if final.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
            raise ExecutionFailed(f"the execution did not succeed: {final.error}")
        page = self._results.ReadResultPage(
            result_service_pb2.ReadResultPageRequest(
                execution_id=final.execution_id, operator_id="even", page_size=100
            ),
            metadata=calls,
            timeout=60,
        )
        return len(page.rows)


def floor(spark: SparkSession) -> int:
    return len(spark.range(ROWS).filter(CONDITION).collect())


def seconds(action: Callable[[], int], expected: int) -> float:
    started = time.perf_counter()
    got = action()
    elapsed = time.perf_counter() - started
    if got != expected:
        raise ExecutionFailed(f"expected {expected} rows, got {got}")
    return elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def traced_run(stack: Stack, client: Client, out: Path) -> list[str]:
    """Runs one more execution inside a span of this process and reads its whole trace
    back from every log of the stack."""
    provider = TracerProvider()
    with out.open("w") as stream:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter("client", stream)))
        with provider.get_tracer("benchmark").start_as_current_span("small workflow") as root:
            client.run()
        trace_id = f"{root.get_span_context().trace_id:032x}"
    time.sleep(1.0)  # the last spans of the services reach their logs
    logs = [out, *stack.log_dir.glob("*.log"), *(stack.unit_root / "logs").glob("*.log")]
    return list(tree_lines(spans_of(trace_id, logs)))


@dataclass(frozen=True)
class SmallLatency:
    """Latencies, in seconds, of the small workflow through the mesh and of the floor."""

    ours: list[float]
    floor: list[float]
    trace: list[str]
    #: The first execution, which started the user's unit.
    first: float
    #: The wait after it, until the unit had warmed up and the stack was quiet.
    settled: float

    def report(self) -> None:
        p50, p95 = statistics.median(self.ours), percentile(self.ours, 0.95)
        floor_p50 = statistics.median(self.floor)
        print(
            f"first execution, on a new unit: {self.first:.1f} s; the unit then warmed up "
            f"and the stack went quiet within {self.settled:.0f} s"
        )
        print(f"(a) submit -> SUCCEEDED -> first page, {len(self.ours)} runs: ", end="")
        print(f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms (goal: p50 <= 500 ms)")
        print(
            f"(b) spark.range({ROWS}).filter(...).collect() in this process: "
            f"p50 {floor_p50 * 1000:.1f} ms"
        )
        print(f"(a) / (b) = {p50 / floor_p50:.1f}")
        print("\ntrace of one execution:")
        print("\n".join(self.trace))


def small_latency(stack: Stack, warehouse_id: str, runs: int, warmup: int) -> SmallLatency:
    """The floor, then the small workflow, each runs times after warmup runs; then one more
    execution, traced (the stack's services must write their spans to their logs). The floor
    runs first, and its Spark is stopped before the workflow runs: its JVM keeps compiling
    for a while after each job, on the cores the mesh needs. The workflow's first execution
    starts the user's unit; the runs measured wait until that unit has warmed up."""
    spark = start_spark(ComputingUnitSettings(spark_master="local[2]"))
    try:
        for _ in range(warmup):
            seconds(lambda: floor(spark), KEPT_ROWS)
        bare = [seconds(lambda: floor(spark), KEPT_ROWS) for _ in range(runs)]
    finally:
        spark.stop()
    client = Client(stack, warehouse_id)
    first = seconds(client.run, KEPT_ROWS)  # the user's unit starts
    waited = settled()
    for _ in range(warmup):
        seconds(client.run, KEPT_ROWS)
    ours = [seconds(client.run, KEPT_ROWS) for _ in range(runs)]
    trace = traced_run(stack, client, stack.state_dir / "client-trace.log")
    return SmallLatency(ours, bare, trace, first, waited)


#: What the services of a stack measured here need: no rate limit, spans in their logs.
SERVICE_ENV = {**UNLIMITED, "TEXERA_LAKE_TRACE_CONSOLE": "true"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    with lake(SERVICE_ENV) as traced:
        print(f"warming up ({args.warmup} runs of each) ...", flush=True)
        measured = small_latency(
            traced.stack, traced.warehouse.warehouse_id, args.runs, args.warmup
        )
    print()
    measured.report()


if __name__ == "__main__":
    main()
