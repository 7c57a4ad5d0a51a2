"""A user's full read of a result through the gateway's Iceberg REST catalog, against the two
other ways to read it, all in one run on the embedded stack (TLS, as by default).

One execution writes a result of ROWS rows (four columns); then, on that table:
  (a) pyiceberg straight on the warehouse's catalog, with the catalog's own token: the
      baseline (what the mesh itself does);
  (b) pyiceberg on the gateway's Iceberg REST catalog with the user's Texera token: the load
      goes through the gateway, the data files come from storage with the credentials the
      catalog vended for that table;
  (c) StreamResult through the gateway, until the client holds the whole result as one Arrow
      table (lake_client.ResultStream).
Each read runs RUNS times in turns, after one untimed round; medians are reported, with the
ratios (b) / (a) and (b) / (c). Nothing is asserted.

Run: .venv/bin/python -m benchmarks.iceberg_rest_read [--rows N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from benchmarks.shared import (
    UNLIMITED,
    UNTRACED,
    USER,
    interleaved,
    lake,
    metadata,
    plan,
    run_execution,
    settled,
    user_catalog,
)
from embedded_stack.stack import Stack
from lake_client.result_stream import ResultStream
from texera.lake.v1 import result_service_pb2

ROWS = 5_000_000


def through_gateway_catalog(stack: Stack, warehouse_id: str) -> RestCatalog:
    """pyiceberg on the gateway's Iceberg REST catalog, as a user's engine opens it."""
    tls = {"ssl": {"cabundle": str(stack.tls.ca_file)}} if stack.tls is not None else {}
    return RestCatalog(
        "gateway",
        uri=stack.iceberg_rest_uri,
        warehouse=warehouse_id,
        token=stack.token(USER),
        **tls,  # type: ignore[arg-type]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS, help="rows of the result")
    parser.add_argument("--runs", type=int, default=5, help="timed reads of each kind")
    arguments = parser.parse_args()
    # requests prefers these to a session's own CA bundle (psf/requests#3829).
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        os.environ.pop(variable, None)
    with lake({**UNLIMITED, **UNTRACED}) as running:
        stack, warehouse = running.stack, running.warehouse
        print(f"writing {arguments.rows:,} rows ...", flush=True)
        _, final = run_execution(stack, warehouse.warehouse_id, plan(arguments.rows))
        [output] = final.outputs
        name = (output.namespace, output.table_name)
        straight = user_catalog(stack, warehouse, "straight").load_table
        gateway = through_gateway_catalog(stack, warehouse.warehouse_id).load_table
        stream = ResultStream(stack.channel("gateway", presenting=None))
        request = result_service_pb2.StreamResultRequest(
            execution_id=final.execution_id, operator_id=output.operator_id
        )
        calls = metadata(stack, "gateway")
        reads: dict[str, Callable[[], pa.Table]] = {
            "a": lambda: straight(name).scan().to_arrow(),
            "b": lambda: gateway(name).scan().to_arrow(),
            "c": lambda: stream.read_all(request, metadata=calls, timeout=600),
        }
        tables: dict[str, pa.Table] = {key: read() for key, read in reads.items()}
        if {table.num_rows for table in tables.values()} != {arguments.rows}:
            raise SystemExit(f"a read lost rows: { {k: t.num_rows for k, t in tables.items()} }")
        settled()
        print("measuring ...", flush=True)
        seconds = interleaved(reads, arguments.runs)
    report(arguments.rows, tables["a"].nbytes, seconds)


def report(rows: int, arrow_bytes: int, seconds: dict[str, float]) -> None:
    labels = {
        "a": "(a) pyiceberg straight on the catalog",
        "b": "(b) pyiceberg on the gateway's Iceberg REST",
        "c": "(c) StreamResult through the gateway",
    }
    print(f"\na result of {rows:,} rows, {arrow_bytes / 2**20:,.1f} MiB in Arrow")
    for key, label in labels.items():
        rate = rows / seconds[key] / 1e6
        print(f"{label:<46} {seconds[key]:7.2f} s  {rate:6.2f} M rows/s")
    print(f"{'(b) / (a), time':<46} {seconds['b'] / seconds['a']:7.2f}")
    print(f"{'(b) / (c), time':<46} {seconds['b'] / seconds['c']:7.2f}")


if __name__ == "__main__":
    main()
