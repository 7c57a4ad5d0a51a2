"""Read benchmark of the result service, all measured in one run on the embedded stack.

One execution writes a result of ROWS rows (four columns) through the computing unit; then,
on that same table:
  (a) pyiceberg in the reader's own process: ``table.scan().to_arrow()``, the baseline;
  (b) StreamResult from the result service, until the client holds the whole result as one
      Arrow table, read with lake_client.ResultStream; speed ratio (a) / (b), target >= 0.7;
      (b') the same with the generated stub, which copies each payload out of its message;
  (c) ReadResultPage of 100 rows at offset 0 and (d) at 90 % depth (skip); (d) / (c),
      target <= 2;
  (e) the result service's peak resident memory while it streams the whole result (after a
      first short stream has loaded what any read needs), against its memory before and the
      size of the result in Arrow;
and the CPU time the reader and the service spend in (a) and (b).

Each measurement runs RUNS times after one untimed warm-up; medians are reported.

Run: .venv/bin/python benchmarks/result_read.py [--rows N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mesh import USER, create_warehouse, metadata, plan, run_execution, user_catalog
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_client.result_stream import ResultStream
from texera.lake.v1 import result_service_pb2, result_service_pb2_grpc

PAGE_ROWS = 100
MIB = 1024 * 1024


def timed(action: Callable[[], object], runs: int) -> float:
    """The median time of runs calls, after one untimed warm-up call."""
    action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cpu_seconds(action: Callable[[], object], *pids: int) -> list[float]:
    """The CPU time (user and system) each of the processes spends while action runs once."""
    processes = [psutil.Process(pid) for pid in pids]

    def used() -> list[float]:
        return [sum(p.cpu_times()[:2]) for p in processes]

    before = used()
    action()
    return [after - earlier for after, earlier in zip(used(), before, strict=True)]


class PeakMemory:
    """Samples a process's resident memory every 10 ms while in use."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.before = self.peak = self._process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(StackSettings(state_dir=state), ephemeral_ports=True) as stack,
    ):
        warehouse = create_warehouse(stack, stack.provision_bucket(USER))
        print(f"writing {args.rows:,} rows ...", flush=True)
        _, final = run_execution(stack, warehouse.warehouse_id, plan(args.rows))
        [output] = final.outputs
        table = user_catalog(stack, warehouse, "reader").load_table(
            (output.namespace, output.table_name)
        )
        channel = grpc.insecure_channel(stack.target("result-service"))
        stub = result_service_pb2_grpc.ResultServiceStub(channel)
        reader = ResultStream(channel)
        calls = metadata(stack)
        execution_id, operator_id = final.execution_id, output.operator_id

        def in_process() -> pa.Table:
            return table.scan().to_arrow()

        whole = result_service_pb2.StreamResultRequest(
            execution_id=execution_id, operator_id=operator_id
        )

        def streamed() -> pa.Table:
            return reader.read_all(whole, metadata=calls, timeout=600)

        def streamed_by_stub() -> pa.Table:
            messages = stub.StreamResult(whole, metadata=calls, timeout=600)
            return pa.ipc.open_stream(b"".join(m.arrow_ipc for m in messages)).read_all()

        def page(skip: int) -> Callable[[], object]:
            request = result_service_pb2.ReadResultPageRequest(
                execution_id=execution_id, operator_id=operator_id, page_size=PAGE_ROWS, skip=skip
            )
            return lambda: stub.ReadResultPage(request, metadata=calls, timeout=60)

        service, me = stack.pid("result-service"), os.getpid()
        # A first short stream loads what any read needs (libraries, clients, pools).
        reader.read_all(
            result_service_pb2.StreamResultRequest(
                execution_id=execution_id, operator_id=operator_id, limit=1_000
            ),
            metadata=calls,
        )
        with PeakMemory(service) as memory:
            streamed()
        expected = in_process()
        if streamed() != expected or streamed_by_stub() != expected:
            raise SystemExit("the stream differs from what pyiceberg reads")
        print("measuring ...", flush=True)
        a = timed(in_process, args.runs)
        b = timed(streamed, args.runs)
        b_stub = timed(streamed_by_stub, args.runs)
        c = timed(page(0), args.runs * 5)
        d = timed(page(args.rows * 9 // 10), args.runs * 5)
        (a_cpu,) = cpu_seconds(in_process, me)
        b_service_cpu, b_client_cpu = cpu_seconds(streamed, service, me)
    arrow_bytes = expected.nbytes
    print()
    print(
        f"result: {args.rows:,} rows, {arrow_bytes / MIB:,.0f} MiB in Arrow, {output.file_count} files"
    )
    print(f"(a) pyiceberg scan().to_arrow() in process     {a:>8.2f} s")
    print(f"(b) StreamResult, whole result as Arrow        {b:>8.2f} s")
    print(f"(b') the same through the generated stub       {b_stub:>8.2f} s")
    print(f"(c) ReadResultPage, {PAGE_ROWS} rows at offset 0       {c * 1000:>8.1f} ms")
    print(f"(d) ReadResultPage, {PAGE_ROWS} rows at 90 % depth     {d * 1000:>8.1f} ms")
    print(
        f"    CPU time: (a) {a_cpu:.2f} s in the reader; (b) {b_service_cpu:.2f} s in the result "
        f"service and {b_client_cpu:.2f} s in the reader"
    )
    growth = (memory.peak - memory.before) / MIB
    print(
        f"(e) result service memory: {memory.before / MIB:,.0f} MiB before, "
        f"{memory.peak / MIB:,.0f} MiB at peak while streaming (+{growth:,.0f} MiB, "
        f"{growth / (arrow_bytes / MIB):.2f} x the result)"
    )
    print(
        f"speed (a) / (b) = {a / b:5.2f}   target >= 0.7   {'met' if a / b >= 0.7 else 'NOT met'}"
    )
    print(f"time  (d) / (c) = {d / c:5.2f}   target <= 2     {'met' if d / c <= 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
