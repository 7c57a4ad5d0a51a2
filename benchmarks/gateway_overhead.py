"""Gateway overhead, measured in one run on the embedded stack.

  (a) a unary call (GetWarehouse) through the gateway vs straight to the warehouse service:
      median latency over two interleaved rounds of CALLS calls each; and through a bare relay
      (benchmarks.bare_relay: grpc.aio forwarding bytes, nothing else), the floor for any
      relay written in Python;
  (b) a result of about 1 GiB in Arrow (ROWS rows: a long and a 200-character string)
      streamed whole through the gateway vs straight from the result service, and through a
      bare relay, read with lake_client.ResultStream: median time of RUNS streams each, the
      three ways taking turns, after one warm-up and once the stack is quiet (the unit that
      wrote the result warms up first);
  and the gateway's peak resident memory while it relays one such stream (whose rows, and
  those through the relay, must equal those read straight).

The ratios are gateway / direct: 1.0 would be no overhead at all. The services record no spans,
as by default, and the gateway runs without its per-user rate limit here.

Run: .venv/bin/python -m benchmarks.gateway_overhead [--rows N] [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pyarrow as pa

from benchmarks.shared import (
    UNLIMITED,
    UNTRACED,
    PeakMemory,
    interleaved,
    lake,
    metadata,
    plan,
    run_execution,
    settled,
)
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


@dataclass(frozen=True)
class UnaryLatency:
    """Median GetWarehouse latencies, in seconds."""

    gateway: float
    direct: float
    bare_relay: float


@dataclass(frozen=True)
class StreamTimes:
    """Median times to read one result whole, in seconds, and the gateway's memory."""

    rows: int
    arrow_bytes: int
    gateway: float
    direct: float
    bare_relay: float
    memory: PeakMemory


def unary_latency(stack: Stack, warehouse_id: str, calls: int) -> UnaryLatency:
    """GetWarehouse through the gateway, straight and through a bare relay, interleaved."""
    gateway, direct = stack.target("gateway"), stack.target("warehouse-service")
    caller = {gateway: metadata(stack, "gateway"), direct: metadata(stack, "warehouse-service")}
    request = warehouse_service_pb2.GetWarehouseRequest(warehouse_id=warehouse_id)

    def get_warehouse(target: str) -> Callable[[], object]:
        stub = warehouse_service_pb2_grpc.WarehouseServiceStub(grpc.insecure_channel(target))
        return lambda: stub.GetWarehouse(request, metadata=caller[target], timeout=30)

    with bare_relay(direct) as relay:
        caller[relay] = caller[direct]
        times: dict[str, list[float]] = {gateway: [], direct: [], relay: []}
        for target in (gateway, direct, relay) * 2:  # interleaved, against drift
            times[target] += latencies(get_warehouse(target), calls)
    return UnaryLatency(*(statistics.median(times[t]) for t in (gateway, direct, relay)))


def stream_times(stack: Stack, warehouse_id: str, rows: int, runs: int) -> StreamTimes:
    """Writes a result of rows wide rows and waits until the stack is quiet (the new unit
    warms up meanwhile), then reads it whole through the gateway, straight from the result
    service and through a bare relay (runs times each, interleaved, after a warm-up), and once
    more through the gateway while its memory is sampled."""
    _, final = run_execution(stack, warehouse_id, plan(rows, WIDE_COLUMNS))
    settled()
    [output] = final.outputs
    request = result_service_pb2.StreamResultRequest(
        execution_id=final.execution_id, operator_id=output.operator_id
    )

    def stream(target: str, caller: tuple[tuple[str, str]]) -> Callable[[], pa.Table]:
        reader = ResultStream(grpc.insecure_channel(target))
        return lambda: reader.read_all(request, metadata=caller, timeout=600)

    direct = stack.target("result-service")
    straight = stream(direct, metadata(stack, "result-service"))
    through_gateway = stream(stack.target("gateway"), metadata(stack, "gateway"))
    table = straight()
    with bare_relay(direct) as relay:
        ways = {
            "gateway": through_gateway,
            "direct": straight,
            "relay": stream(relay, metadata(stack, "result-service")),
        }
        streamed = interleaved(ways, runs)
        relayed = ways["relay"]()
    with PeakMemory(stack.pid("gateway")) as memory:
        through = through_gateway()
    if not table.equals(through) or not table.equals(relayed):
        raise SystemExit("the result read through the gateway or the relay is not the same")
    return StreamTimes(
        table.num_rows,
        table.nbytes,
        streamed["gateway"],
        streamed["direct"],
        streamed["relay"],
        memory,
    )


def report(unary: UnaryLatency, streams: StreamTimes) -> None:
    print(f"(a) GetWarehouse through the gateway (median)  {unary.gateway * 1000:>8.2f} ms")
    print(f"    GetWarehouse straight (median)             {unary.direct * 1000:>8.2f} ms")
    print(f"    GetWarehouse through a bare relay (median) {unary.bare_relay * 1000:>8.2f} ms")
    print(f"    gateway / direct = {unary.gateway / unary.direct:5.2f}")
    print(
        f"    added: gateway {(unary.gateway - unary.direct) * 1000:.2f} ms, "
        f"bare relay {(unary.bare_relay - unary.direct) * 1000:.2f} ms"
    )
    print(
        f"(b) a result of {streams.rows:,} rows, {streams.arrow_bytes / MIB:,.0f} MiB in Arrow, "
        "streamed whole"
    )
    print(f"    through the gateway (median)               {streams.gateway:>8.2f} s")
    print(f"    straight (median)                          {streams.direct:>8.2f} s")
    print(f"    through a bare relay (median)              {streams.bare_relay:>8.2f} s")
    print(
        f"    gateway / direct = {streams.gateway / streams.direct:5.2f}, "
        f"bare relay / direct = {streams.bare_relay / streams.direct:5.2f}"
    )
    memory = streams.memory
    print(
        f"    gateway memory while relaying it: {memory.before / MIB:,.0f} MiB before, "
        f"{memory.peak / MIB:,.0f} MiB at peak (+{(memory.peak - memory.before) / MIB:,.0f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    # Plaintext throughout, the bare relay's too: this is the gateway's own cost (what TLS
    # adds is benchmarks/transport_tls.py's).
    with lake({**UNLIMITED, **UNTRACED}, tls=False) as measured:
        stack, warehouse_id = measured.stack, measured.warehouse.warehouse_id
        print("measuring ...", flush=True)
        unary = unary_latency(stack, warehouse_id, args.calls)
        print(f"writing {args.rows:,} rows, then streaming them ...", flush=True)
        streams = stream_times(stack, warehouse_id, args.rows, args.runs)
    print()
    report(unary, streams)


if __name__ == "__main__":
    main()
