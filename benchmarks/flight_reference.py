"""The transport reference of benchmarks.result_read: a bare Arrow Flight server.

It streams one table's current snapshot, read exactly as the result service
reads it (the same scan plan, FileReader and read-ahead), over Arrow Flight:
C++ gRPC that writes each record batch into the wire without a Python step or
a copy. What the benchmark measures through it is what a cross-process stream
of the result costs on this machine when the transport is as cheap as it gets;
StreamResult's gap to it is what Python gRPC adds.

No auth, no access checks: it exists for the benchmark only, on loopback.

Run (the benchmark does): python -m benchmarks.flight_reference CATALOG_URI TOKEN_FILE WAREHOUSE
NAMESPACE TABLE (TOKEN_FILE holds a catalog access token); it prints its port, then serves
DoGet (any ticket: the whole table) until stopped.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import flight
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import AlwaysTrue

from catalog_map.credentials import RenewingFileIO
from result_service.file_reader import FileReader
from result_service.plan import plan_scan
from result_service.scan import START, Scan

#: Files read at once, as the result service's default (TEXERA_LAKE_RESULT_READ_AHEAD_FILES).
FILES_AT_ONCE = 2


class WholeTable(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, scan: Scan) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self._scan = scan

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.GeneratorStream:
        return flight.GeneratorStream(self._scan.arrow_schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        prefetcher = self._scan.read_ahead(START, FILES_AT_ONCE)
        try:
            for _, chunk in prefetcher.items():
                yield chunk.rows
        finally:
            prefetcher.close()


def scan_of(catalog_uri: str, token: str, warehouse: str, namespace: str, name: str) -> Scan:
    catalog = RestCatalog("reference", uri=catalog_uri, warehouse=warehouse, token=token)
    table = catalog.load_table((namespace, name))
    snapshot = table.current_snapshot()
    if snapshot is None:
        raise SystemExit(f"{namespace}.{name} has no snapshot")
    files = RenewingFileIO(dict(table.io.properties), None, table.location())
    reader = FileReader(
        table.metadata,
        files,
        table_schema=table.schema(),
        projected=table.schema(),
        row_filter=AlwaysTrue(),
    )
    return Scan(plan_scan(table, snapshot, AlwaysTrue()), reader, reader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("catalog_uri", "token_file", "warehouse", "namespace", "table"):
        parser.add_argument(name)
    args = parser.parse_args()
    token = Path(args.token_file).read_text().strip()
    server = WholeTable(
        scan_of(args.catalog_uri, token, args.warehouse, args.namespace, args.table)
    )
    print(server.port, flush=True)
    server.serve()


if __name__ == "__main__":
    main()
