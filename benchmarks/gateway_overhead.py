"""Gateway overhead, measured in one run on the embedded stack.

  (a) a unary call (GetWarehouse) through the gateway vs straight to the warehouse service:
      median latency of CALLS calls each, one after the other; and through a bare relay
      (benchmarks.bare_relay: grpc.aio forwarding bytes, nothing else), the floor for any
      relay written in Python;
  (b) a result of about 1 GiB in Arrow (ROWS rows: a long and a 200-character string)
      streamed whole through the gateway vs straight from the result service, read with
      lake_client.ResultStream: median time of RUNS streams each, after one warm-up;
  and the gateway's peak resident memory while it relays one such stream.

The ratios are gateway / direct: 1.0 would be no overhead at all. The gateway runs without its
per-user rate limit here.

Run: .venv/bin/python -m benchmarks.gateway_overhead [--rows N] [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import grpc
import pyarrow as pa

from benchmarks.shared import (
    UNLIMITED,
    USER,
    PeakMemory,
    create_warehouse,
    metadata,
    plan,
    run_execution,
    timed,
)
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_client.result_stream import ResultStream
from service_runtime.ports import free_port
from texera.lake.v1 import (
    result_service_pb2,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

MIB = 1024 * 1024


#: A long and a 200-character string: about 210 bytes a row in Arrow.
WIDE_COLUMNS = (
    {"expression": "id"},
    {"expression": "lpad(cast(id AS STRING), 200, 'x')", "alias": "text"},
)


def latencies(call: Callable[[], object], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


@contextlib.contextmanager
def bare_relay(backend: str) -> Iterator[str]:
    """A bare relay to backend in a process of its own; its target."""
    host = "127.0.0.1"
    target = f"{host}:{free_port(host)}"
    command = [sys.executable, "-m", "benchmarks.bare_relay", "--listen", target]
    with subprocess.Popen([*command, "--backend", backend]) as relay:
        try:
            grpc.channel_ready_future(grpc.insecure_channel(target)).result(timeout=30)
            yield target
        finally:
            relay.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(StackSettings(state_dir=state), ephemeral_ports=True, service_env=UNLIMITED) as stack,
    ):
        calls = {
            stack.target(part): metadata(stack, part)
            for part in ("gateway", "warehouse-service", "result-service")
        }
        warehouse = create_warehouse(stack, stack.provision_bucket(USER))
        print(f"writing {args.rows:,} rows ...", flush=True)
        _, final = run_execution(stack, warehouse.warehouse_id, plan(args.rows, WIDE_COLUMNS))
        [output] = final.outputs

        def get_warehouse(target: str) -> Callable[[], object]:
            stub = warehouse_service_pb2_grpc.WarehouseServiceStub(grpc.insecure_channel(target))
            request = warehouse_service_pb2.GetWarehouseRequest(warehouse_id=warehouse.warehouse_id)
            return lambda: stub.GetWarehouse(request, metadata=calls[target], timeout=30)

        def stream(target: str) -> Callable[[], pa.Table]:
            reader = ResultStream(grpc.insecure_channel(target))
            request = result_service_pb2.StreamResultRequest(
                execution_id=final.execution_id, operator_id=output.operator_id
            )
            return lambda: reader.read_all(request, metadata=calls[target], timeout=600)

        print("measuring ...", flush=True)
        gateway, warehouses, results = (
            stack.target("gateway"),
            stack.target("warehouse-service"),
            stack.target("result-service"),
        )
        with bare_relay(warehouses) as relay:
            calls[relay] = calls[warehouses]
            unary: dict[str, list[float]] = {gateway: [], warehouses: [], relay: []}
            for target in (gateway, warehouses, relay) * 2:  # interleaved, against drift
                unary[target] += latencies(get_warehouse(target), args.calls)
        table = stream(results)()
        streamed = {target: timed(stream(target), args.runs) for target in (gateway, results)}
        with PeakMemory(stack.pid("gateway")) as memory:
            stream(gateway)()
    gateway_unary, direct_unary, relay_unary = (
        statistics.median(unary[t]) for t in (gateway, warehouses, relay)
    )
    print()
    print(f"result: {table.num_rows:,} rows, {table.nbytes / MIB:,.0f} MiB in Arrow")
    print(f"(a) GetWarehouse through the gateway (median)  {gateway_unary * 1000:>8.2f} ms")
    print(f"    GetWarehouse straight (median)             {direct_unary * 1000:>8.2f} ms")
    print(f"    GetWarehouse through a bare relay (median) {relay_unary * 1000:>8.2f} ms")
    print(f"    gateway / direct = {gateway_unary / direct_unary:5.2f}")
    print(
        f"    added: gateway {(gateway_unary - direct_unary) * 1000:.2f} ms, "
        f"bare relay {(relay_unary - direct_unary) * 1000:.2f} ms"
    )
    print(f"(b) stream through the gateway (median)        {streamed[gateway]:>8.2f} s")
    print(f"    stream straight (median)                   {streamed[results]:>8.2f} s")
    print(f"    gateway / direct = {streamed[gateway] / streamed[results]:5.2f}")
    growth = (memory.peak - memory.before) / MIB
    print(
        f"gateway memory while relaying it: {memory.before / MIB:,.0f} MiB before, "
        f"{memory.peak / MIB:,.0f} MiB at peak (+{growth:,.0f} MiB)"
    )


if __name__ == "__main__":
    main()
