"""Interactive speed in one run: what a user building workflows waits for, against its floors.

  1. a 10-row workflow through the gateway on a warm unit, submit -> SUCCEEDED -> first page,
     p50 and p95, against the same computation in Spark in this process, and the trace of one
     execution (benchmarks.small_workflow, on a stack whose services log their spans);
  2. the gateway: a unary call through it, straight and through a bare relay, and a whole
     result streamed through it and straight (benchmarks.gateway_overhead);
  3. writing WRITE_ROWS rows through the unit against Spark writing them as plain Parquet
     (benchmarks.cu_write).

Parts 2 and 3 run on a second stack whose services record no spans, as by default, and whose
registry makes units of this machine's cores (cu_write.UNIT_ENV), the floor's size.
Goals: small workflow p50 <= 0.5 s; gateway +0.5 ms a unary call and a stream <= 1.2 x
straight; write (a) / (b) <= 1.2.

Run: .venv/bin/python -m benchmarks.interactive [--runs N] [--warmup N] [--calls N]
     [--stream-rows N] [--write-rows N] [--write-runs N]
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.cu_write import UNIT_ENV, write_times
from benchmarks.gateway_overhead import report, stream_times, unary_latency
from benchmarks.shared import UNLIMITED, UNTRACED, lake
from benchmarks.small_workflow import SERVICE_ENV, small_latency


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="small workflows measured")
    parser.add_argument("--warmup", type=int, default=3, help="small workflows before")
    parser.add_argument("--calls", type=int, default=500, help="unary calls per round")
    parser.add_argument("--stream-rows", type=int, default=5_000_000)
    parser.add_argument("--write-rows", type=int, default=5_000_000)
    parser.add_argument("--write-runs", type=int, default=5)
    args = parser.parse_args()
    with lake(SERVICE_ENV) as traced:
        print("1. the small workflow ...", flush=True)
        small = small_latency(traced.stack, traced.warehouse.warehouse_id, args.runs, args.warmup)
    # Plaintext: the gateway's own cost against a bare relay (TLS: benchmarks.transport_tls).
    with lake({**UNLIMITED, **UNTRACED, **UNIT_ENV}, tls=False) as plain:
        warehouse_id = plain.warehouse.warehouse_id
        print("2. the gateway ...", flush=True)
        unary = unary_latency(plain.stack, warehouse_id, args.calls)
        streams = stream_times(plain.stack, warehouse_id, args.stream_rows, 5)
        print(f"3. writing {args.write_rows:,} rows ...", flush=True)
        written = write_times(
            plain.stack, plain.grant, warehouse_id, args.write_rows, args.write_runs
        )

    print("\n1. the small workflow")
    small.report()
    print("\n2. the gateway")
    report(unary, streams)
    ours, floor = statistics.median(written.ours), statistics.median(written.floor)
    print(f"\n3. writing {args.write_rows:,} rows")
    print(f"(a) through the unit, submit to committed (median) {ours:>6.1f} s")
    print(f"(b) Spark writing plain Parquet (median)           {floor:>6.1f} s")

    p50 = statistics.median(small.ours)
    added_ms = (unary.gateway - unary.direct) * 1000
    stream_ratio = streams.gateway / streams.direct
    print("\nsummary")
    print(
        f"small workflow p50           {p50 * 1000:>8.0f} ms  goal <= 500 ms  {_verdict(p50 <= 0.5)}"
    )
    print(
        f"gateway, unary call added    {added_ms:>8.2f} ms  goal <= 0.5 ms  {_verdict(added_ms <= 0.5)}"
    )
    print(
        f"gateway / straight, stream   {stream_ratio:>8.2f}     goal <= 1.2     {_verdict(stream_ratio <= 1.2)}"
    )
    print(
        f"write (a) / (b)              {written.ratio:>8.2f}     goal <= 1.2     {_verdict(written.ratio <= 1.2)}"
    )


if __name__ == "__main__":
    main()
