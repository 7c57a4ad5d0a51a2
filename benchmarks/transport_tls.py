"""What TLS costs through the gateway, against plaintext, measured in one run.

Two embedded stacks run side by side: one plaintext, one in TLS mode (the gateway serves TLS;
behind it the registry and the result service serve mutual TLS, and the services call each
other over it). On each, a user calls the gateway as users do, on a channel of
Stack.channel("gateway", presenting=None): TLS verifying the stack's CA in TLS mode,
plaintext otherwise.

  (a) GetWarehouse on one open channel: p50 and p90 of ROUNDS rounds of CALLS calls, after a
      warm-up;
  (b) GetWarehouse on a new channel each time (connection, TLS handshake and call): median
      of CONNECTIONS calls;
  (c) a result of about STREAM_MIB MiB in Arrow (a long and a 200-character string a row)
      read whole with StreamResult through the gateway, forwarded from the result service:
      the bytes of the messages received, counted without decoding their Arrow payload, and
      MiB/s; median of RUNS streams, after one warm-up and once both stacks are quiet, with
      the CPU the gateway and the result service spend on a stream.

The two stacks take turns in every measurement, in alternating order. The ratios are TLS /
plaintext. The services record no spans, as by default, and the gateway runs without its
per-user rate limit here. Nothing is asserted.

Run: .venv/bin/python -m benchmarks.transport_tls [--calls N] [--rounds N]
     [--connections N] [--stream-mib N] [--runs N]
A quick run: --stream-mib 64 --runs 2 --calls 100 --connections 20
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from benchmarks.gateway_overhead import MIB, WIDE_COLUMNS, latencies
from benchmarks.shared import UNLIMITED, UNTRACED, USER, metadata, plan, settled
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from lake_client.result_stream import METHOD, decode
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_service_pb2,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

#: Bytes a row of WIDE_COLUMNS takes in Arrow: a long, 200 characters and their offset.
ROW_BYTES = 8 + 200 + 4


class Client:
    """A user of one stack with a warehouse of their own, calling its gateway on one channel."""

    def __init__(self, name: str, stack: Stack) -> None:
        self.name, self.stack = name, stack
        self.calls = metadata(stack, "gateway")
        channel = stack.channel("gateway", presenting=None)
        self.warehouses = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
        self.executions = execution_service_pb2_grpc.ExecutionServiceStub(channel)
        self.stream_result: grpc.UnaryStreamMultiCallable[
            result_service_pb2.StreamResultRequest, bytes
        ] = channel.unary_stream(
            METHOD,
            request_serializer=result_service_pb2.StreamResultRequest.SerializeToString,
            response_deserializer=None,  # the message's bytes as received
        )
        request = create_warehouse_request(stack.provision_bucket(USER), name="benchmark")
        created = self.warehouses.CreateWarehouse(request, metadata=self.calls, timeout=60)
        self.warehouse_id = created.warehouse.warehouse_id
        self.services = [psutil.Process(stack.pid(s)) for s in ("gateway", "result-service")]

    def get_warehouse(self) -> None:
        request = warehouse_service_pb2.GetWarehouseRequest(warehouse_id=self.warehouse_id)
        self.warehouses.GetWarehouse(request, metadata=self.calls, timeout=30)

    def get_warehouse_on_a_new_channel(self) -> None:
        with self.stack.channel("gateway", presenting=None) as channel:
            request = warehouse_service_pb2.GetWarehouseRequest(warehouse_id=self.warehouse_id)
            stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
            stub.GetWarehouse(request, metadata=self.calls, timeout=30)

    def write_result(self, rows: int) -> result_service_pb2.StreamResultRequest:
        """Runs a workflow materializing rows wide rows; the request that streams them."""
        submitted = self.executions.SubmitExecution(
            execution_service_pb2.SubmitExecutionRequest(
                warehouse_id=self.warehouse_id, workflow=plan(rows, WIDE_COLUMNS)
            ),
            metadata=self.calls,
            timeout=600,
        ).execution
        final = submitted
        watch = execution_service_pb2.WatchExecutionRequest(execution_id=submitted.execution_id)
        for event in self.executions.WatchExecution(watch, metadata=self.calls, timeout=3600):
            final = event.execution
        if final.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
            raise SystemExit(f"{self.name}: the execution did not succeed: {final.error}")
        [output] = final.outputs
        return result_service_pb2.StreamResultRequest(
            execution_id=final.execution_id, operator_id=output.operator_id
        )

    def stream(self, request: result_service_pb2.StreamResultRequest) -> tuple[int, int]:
        """The result read whole: the bytes received and the rows they hold."""
        received = rows = 0
        for message in self.stream_result(request, metadata=self.calls, timeout=900):
            received += len(message)
            rows += decode(message).row_count
        return received, rows

    def cpu(self) -> list[float]:
        """CPU seconds (user and system) the gateway and the result service used so far."""
        return [sum(process.cpu_times()[:2]) for process in self.services]


@dataclass
class Streams:
    """The measured streams of one stack: the seconds, the bytes received and the CPU of the
    gateway and the result service, each stream's."""

    seconds: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    cpu: list[list[float]] = field(default_factory=list)

    def median_cpu(self, service: int) -> float:
        return statistics.median(used[service] for used in self.cpu)

    @property
    def mib_per_second(self) -> float:
        return statistics.median(
            b / MIB / s for b, s in zip(self.received, self.seconds, strict=True)
        )


def turns(clients: Sequence[Client], rounds: int) -> Iterator[Client]:
    """Every client once a round, in reversed order every other round."""
    for number in range(rounds):
        yield from clients if number % 2 == 0 else reversed(clients)


def measure_streams(
    clients: Sequence[Client],
    requests: dict[str, result_service_pb2.StreamResultRequest],
    rows: int,
    runs: int,
) -> dict[str, Streams]:
    """runs streams of each client's result, in turns, after one warm-up each."""
    for client in clients:
        client.stream(requests[client.name])
    streams = {client.name: Streams() for client in clients}
    for client in turns(clients, runs):
        before = client.cpu()
        started = time.perf_counter()
        received, got = client.stream(requests[client.name])
        elapsed = time.perf_counter() - started
        if got != rows:
            raise SystemExit(f"{client.name}: streamed {got:,} rows of {rows:,}")
        record = streams[client.name]
        record.seconds.append(elapsed)
        record.received.append(received)
        record.cpu.append([after - was for after, was in zip(client.cpu(), before, strict=True)])
    return streams


def percentiles(times: list[float]) -> tuple[float, float]:
    """p50 and p90."""
    deciles = statistics.quantiles(times, n=10)
    return deciles[4], deciles[8]


def row(label: str, plain: float, tls: float, unit: str, scale: float = 1.0) -> None:
    """One line of the table: plaintext's and TLS's figures (times scale) and their ratio."""
    print(
        f"{label:<42} {plain * scale:>10.2f} {unit:<5} {tls * scale:>10.2f} {unit:<5}"
        f" {tls / plain:>12.2f}"
    )


def report(
    unary: dict[str, list[float]],
    fresh: dict[str, list[float]],
    streams: dict[str, Streams],
    rows: int,
) -> None:
    (plain_p50, plain_p90), (tls_p50, tls_p90) = map(percentiles, unary.values())
    plain_fresh, tls_fresh = map(statistics.median, fresh.values())
    plain, tls = streams.values()
    print(f"\n{'':<42} {'plaintext':>16} {'TLS':>16} {'TLS / plain':>12}")
    row("(a) GetWarehouse, one channel, p50", plain_p50, tls_p50, "ms", 1000)
    row("    p90", plain_p90, tls_p90, "ms", 1000)
    row("(b) GetWarehouse, a new channel each, p50", plain_fresh, tls_fresh, "ms", 1000)
    print(f"(c) a result of {rows:,} rows streamed whole")
    row("    received", plain.received[0], tls.received[0], "MiB", 1 / MIB)
    row("    time (median)", statistics.median(plain.seconds), statistics.median(tls.seconds), "s")
    row("    throughput (median)", plain.mib_per_second, tls.mib_per_second, "MiB/s")
    for index, service in enumerate(("gateway", "result service")):
        label = f"    CPU of the {service} (median)"
        row(label, plain.median_cpu(index), tls.median_cpu(index), "s")
    for name, record in streams.items():
        print(f"    {name} streams: " + ", ".join(f"{s:.2f} s" for s in record.seconds))


@contextlib.contextmanager
def two_stacks() -> Iterator[tuple[Stack, Stack]]:
    """A plaintext stack and one in TLS mode, each in a folder of its own, both running."""
    env = {**UNLIMITED, **UNTRACED}
    with tempfile.TemporaryDirectory() as state, contextlib.ExitStack() as running:
        stacks = [
            running.enter_context(
                Stack(
                    StackSettings(state_dir=str(Path(state, name)), tls=tls),
                    ephemeral_ports=True,
                    service_env=env,
                )
            )
            for name, tls in (("plaintext", False), ("tls", True))
        ]
        yield stacks[0], stacks[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="unary calls per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of unary calls")
    parser.add_argument("--connections", type=int, default=100, help="calls on new channels")
    parser.add_argument("--stream-mib", type=int, default=1024, help="result size in Arrow")
    parser.add_argument("--runs", type=int, default=5, help="streams measured per stack")
    args = parser.parse_args()
    rows = args.stream_mib * MIB // ROW_BYTES
    print("starting a plaintext stack and one in TLS mode ...", flush=True)
    with two_stacks() as (plain_stack, tls_stack):
        clients = [Client("plaintext", plain_stack), Client("TLS", tls_stack)]
        print(f"writing {rows:,} rows on each ...", flush=True)
        requests = {client.name: client.write_result(rows) for client in clients}
        print(f"waited {settled():.0f} s for the stacks to go quiet; measuring ...", flush=True)
        unary: dict[str, list[float]] = {client.name: [] for client in clients}
        for client in clients:
            latencies(client.get_warehouse, 100)  # warm-up
        for client in turns(clients, args.rounds):
            unary[client.name] += latencies(client.get_warehouse, args.calls)
        fresh: dict[str, list[float]] = {client.name: [] for client in clients}
        for client in turns(clients, args.connections):
            fresh[client.name] += latencies(client.get_warehouse_on_a_new_channel, 1)
        streams = measure_streams(clients, requests, rows, args.runs)

    report(unary, fresh, streams, rows)


if __name__ == "__main__":
    main()
