"""Read benchmark of the result service, all measured in one run on the embedded stack.

One execution writes a result of ROWS rows (four columns) through the computing unit; then,
on that same table:
  (a) pyiceberg in the reader's own process: ``table.scan().to_arrow()``, the baseline;
  (b) StreamResult from the result service, until the client holds the whole result as one
      Arrow table, read with lake_client.ResultStream; speed ratio (a) / (b), target >= 0.7;
      (b') the same with the generated stub, which copies each payload out of its message;
      (b'') the same as (b) through the gateway, the public endpoint;
      (f) the transport reference: the same files read the same way by a bare Arrow Flight
      server in another process (benchmarks.flight_reference), C++ gRPC without a Python
      step or a copy per batch; (a) / (f) is as close as any stream gets on this machine;
  (c) ReadResultPage of 100 rows at offset 0 and (d) at 90 % depth (skip); (d) / (c),
      target <= 2;
  (e) the result service's peak resident memory while it streams the whole result (after a
      first short stream has loaded what any read needs), against its memory before and the
      size of the result in Arrow;
and the CPU time the reader, the service and the S3 endpoint spend in (a) and (b), with the
least time (b) can take on this machine's cores for that much CPU.

Each measurement runs RUNS times after one untimed warm-up; medians are reported.

Run: .venv/bin/python -m benchmarks.result_read [--rows N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pyarrow as pa
from pyarrow import flight
from pyiceberg.table import Table

from benchmarks.shared import (
    USER,
    PeakMemory,
    cpu_seconds,
    create_warehouse,
    metadata,
    plan,
    run_execution,
    timed,
    user_catalog,
)
from embedded_stack.secrets import write_secret
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from lake_client.result_stream import ResultStream
from service_runtime.processes import ManagedProcess, wait_until
from texera.lake.v1 import result_service_pb2, result_service_pb2_grpc

PAGE_ROWS = 100
MIB = 1024 * 1024


@dataclass
class Readings:
    rows: int
    arrow_bytes: int
    files: int
    #: Median seconds of each way of reading, by name.
    seconds: dict[str, float]
    cpu: dict[str, float]
    memory: PeakMemory


class Readers:
    """The ways of reading one result that the benchmark compares."""

    def __init__(
        self, stack: Stack, table: Table, execution_id: str, operator_id: str, flight_port: int
    ) -> None:
        self.table = table
        self.calls = metadata(stack, "result-service")
        self.gateway_calls = metadata(stack, "gateway")
        channel = stack.channel("result-service")
        self.stub = result_service_pb2_grpc.ResultServiceStub(channel)
        self.direct = ResultStream(channel)
        self.gateway = ResultStream(stack.channel("gateway", presenting=None))
        self.reference = flight.connect(f"grpc://127.0.0.1:{flight_port}")
        self.whole = result_service_pb2.StreamResultRequest(
            execution_id=execution_id, operator_id=operator_id
        )

    def in_process(self) -> pa.Table:
        return self.table.scan().to_arrow()

    def streamed(self) -> pa.Table:
        return self.direct.read_all(self.whole, metadata=self.calls, timeout=600)

    def through_gateway(self) -> pa.Table:
        return self.gateway.read_all(self.whole, metadata=self.gateway_calls, timeout=600)

    def by_stub(self) -> pa.Table:
        messages = self.stub.StreamResult(self.whole, metadata=self.calls, timeout=600)
        return pa.ipc.open_stream(b"".join(m.arrow_ipc for m in messages)).read_all()

    def by_flight(self) -> pa.Table:
        return self.reference.do_get(flight.Ticket(b"")).read_all()

    def first_rows(self) -> None:
        """A short stream, which loads what any read needs (libraries, clients, pools)."""
        short = result_service_pb2.StreamResultRequest()
        short.CopyFrom(self.whole)
        short.limit = 1_000
        self.direct.read_all(short, metadata=self.calls)

    def page(self, skip: int) -> Callable[[], object]:
        request = result_service_pb2.ReadResultPageRequest(
            execution_id=self.whole.execution_id,
            operator_id=self.whole.operator_id,
            page_size=PAGE_ROWS,
            skip=skip,
        )
        return lambda: self.stub.ReadResultPage(request, metadata=self.calls, timeout=60)


@contextmanager
def reference_server(
    stack: Stack, warehouse: str, namespace: str, name: str
) -> Iterator[tuple[int, int]]:
    """benchmarks.flight_reference serving the table while in use; (pid, port)."""
    log = stack.log_dir / "flight-reference.log"
    server = ManagedProcess(
        "flight-reference",
        [
            *(sys.executable, "-m", "benchmarks.flight_reference"),
            f"{stack.catalog_url}/catalog",
            str(
                write_secret(
                    stack.secrets_dir / "flight-reference" / "token", stack.catalog_token()
                )
            ),
            *(warehouse, namespace, name),
        ],
        log,
    )
    try:
        wait_until(lambda: log.read_text().strip().isdigit(), server, 60, "flight-reference")
        yield server.pid, int(log.read_text())
    finally:
        server.stop()


def measure(rows: int, runs: int) -> Readings:
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(StackSettings(state_dir=state), ephemeral_ports=True) as stack,
        ExitStack() as cleanup,
    ):
        warehouse = create_warehouse(stack, stack.provision_bucket(USER))
        print(f"writing {rows:,} rows ...", flush=True)
        _, final = run_execution(stack, warehouse.warehouse_id, plan(rows))
        [output] = final.outputs
        table = user_catalog(stack, warehouse, "reader").load_table(
            (output.namespace, output.table_name)
        )
        reference, flight_port = cleanup.enter_context(
            reference_server(
                stack, warehouse.catalog_warehouse_name, output.namespace, output.table_name
            )
        )
        readers = Readers(stack, table, final.execution_id, output.operator_id, flight_port)
        service, me = stack.pid("result-service"), os.getpid()
        readers.first_rows()
        with PeakMemory(service) as memory:
            readers.streamed()
        expected = readers.in_process()
        ways = {
            "a": readers.in_process,
            "b": readers.streamed,
            "b by stub": readers.by_stub,
            "b by gateway": readers.through_gateway,
            "f": readers.by_flight,
        }
        if any(read() != expected for read in ways.values()):
            raise SystemExit("a stream differs from what pyiceberg reads")
        print("measuring ...", flush=True)
        seconds = {name: timed(read, runs) for name, read in ways.items()}
        seconds["c"] = timed(readers.page(0), runs * 5)
        seconds["d"] = timed(readers.page(rows * 9 // 10), runs * 5)
        storage = (stack.pid("s3"),)  # moto inside its gate
        a_reader, *a_storage = cpu_seconds(readers.in_process, me, *storage)
        b_service, b_reader, *b_storage = cpu_seconds(readers.streamed, service, me, *storage)
        f_server, f_reader = cpu_seconds(readers.by_flight, reference, me)
    return Readings(
        rows=rows,
        arrow_bytes=expected.nbytes,
        files=output.file_count,
        seconds=seconds,
        cpu={
            "a": a_reader,
            "a storage": sum(a_storage),
            "b service": b_service,
            "b reader": b_reader,
            "b storage": sum(b_storage),
            "f server": f_server,
            "f reader": f_reader,
        },
        memory=memory,
    )


def report(r: Readings) -> None:
    s, cpu, memory = r.seconds, r.cpu, r.memory
    print()
    print(f"result: {r.rows:,} rows, {r.arrow_bytes / MIB:,.0f} MiB in Arrow, {r.files} files")
    print(f"(a) pyiceberg scan().to_arrow() in process     {s['a']:>8.2f} s")
    print(f"(b) StreamResult, whole result as Arrow        {s['b']:>8.2f} s")
    print(f"(b') the same through the generated stub       {s['b by stub']:>8.2f} s")
    print(f"(b'') (b) through the gateway                  {s['b by gateway']:>8.2f} s")
    print(f"(f) reference: bare Arrow Flight server        {s['f']:>8.2f} s")
    print(f"(c) ReadResultPage, {PAGE_ROWS} rows at offset 0       {s['c'] * 1000:>8.1f} ms")
    print(f"(d) ReadResultPage, {PAGE_ROWS} rows at 90 % depth     {s['d'] * 1000:>8.1f} ms")
    print(
        f"    CPU time: (a) {cpu['a']:.2f} s in the reader, {cpu['a storage']:.2f} s in the S3 "
        f"endpoint; (b) {cpu['b service']:.2f} s in the result service, {cpu['b reader']:.2f} s "
        f"in the reader, {cpu['b storage']:.2f} s in the S3 endpoint; (f) {cpu['f server']:.2f} s "
        f"in the Flight server, {cpu['f reader']:.2f} s in the reader"
    )
    cores = os.cpu_count() or 1
    floor = (cpu["b service"] + cpu["b reader"] + cpu["b storage"]) / cores
    print(
        f"    on {cores} cores (b) needs at least {floor:.2f} s for that CPU time, so (a) / (b) "
        f"cannot exceed {s['a'] / floor:.2f} here"
    )
    growth = (memory.peak - memory.before) / MIB
    print(
        f"(e) result service memory: {memory.before / MIB:,.0f} MiB before, "
        f"{memory.peak / MIB:,.0f} MiB at peak while streaming (+{growth:,.0f} MiB, "
        f"{growth / (r.arrow_bytes / MIB):.2f} x the result)"
    )
    for label, way in (("(b)  ", "b"), ("(b'')", "b by gateway")):
        ratio = s["a"] / s[way]
        verdict = "met" if ratio >= 0.7 else "NOT met"
        print(f"speed (a) / {label} = {ratio:5.2f}   target >= 0.7   {verdict}")
    print(f"speed (a) / (f)   = {s['a'] / s['f']:5.2f}   (the transport reference, no target)")
    ratio = s["d"] / s["c"]
    verdict = "met" if ratio <= 2 else "NOT met"
    print(f"{'time  (d) / (c)':<17} = {ratio:5.2f}   target <= 2     {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report(measure(args.rows, args.runs))


if __name__ == "__main__":
    main()
