"""`texera-lake results | page | snapshots`: read what an execution wrote."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from google.protobuf import json_format

from lake_cli.connection import Connection
from lake_cli.render import table
from texera.lake.v1 import result_pb2, result_service_pb2

rs = result_service_pb2


def list_results(connection: Connection, args: argparse.Namespace) -> None:
    """Lists an execution's results with their rows and columns."""
    listed = connection.results.ListResults(
        rs.ListResultsRequest(execution_id=args.execution_id, page_size=500),
        metadata=connection.metadata,
        timeout=60,
    )
    table(
        ("operator", "rows", "files", "snapshot", "columns"),
        [
            (
                r.operator_id,
                r.row_count,
                r.file_count,
                str(r.snapshot_id),
                ", ".join(f"{c.name} {c.iceberg_type}" for c in r.columns),
            )
            for r in listed.results
        ],
    )


def page(connection: Connection, args: argparse.Namespace) -> None:
    """Prints a page of a result as a table, and the token of the next page."""
    request = rs.ReadResultPageRequest(
        execution_id=args.execution_id,
        operator_id=args.operator_id,
        columns=[c for c in args.columns.split(",") if c] if args.columns else [],
        filter=args.filter,
        page_size=args.size,
        skip=args.skip,
        page_token=args.page_token,
    )
    if args.snapshot:
        request.snapshot.snapshot_id = args.snapshot
    print_page(connection, request)


def print_page(connection: Connection, request: rs.ReadResultPageRequest) -> None:
    answer = connection.results.ReadResultPage(request, metadata=connection.metadata, timeout=120)
    names = [c.name for c in answer.columns]
    rows = [json_format.MessageToDict(row) for row in answer.rows]
    table(names, [[row.get(name) for name in names] for row in rows])
    print(f"({len(rows)} rows from snapshot {answer.snapshot_id})", file=sys.stderr)
    if answer.next_page_token:
        print(f"next page: --page-token {answer.next_page_token}", file=sys.stderr)


def _time(snapshot: result_pb2.Snapshot) -> str:
    moment = datetime.fromtimestamp(snapshot.commit_time.ToMilliseconds() / 1000, UTC)
    return moment.isoformat(timespec="milliseconds")


def snapshots(connection: Connection, args: argparse.Namespace) -> None:
    """Lists a result's snapshots, oldest first."""
    listed = connection.results.ListSnapshots(
        rs.ListSnapshotsRequest(
            execution_id=args.execution_id, operator_id=args.operator_id, page_size=1000
        ),
        metadata=connection.metadata,
        timeout=60,
    )
    table(
        ("snapshot", "committed", "operation", "added rows", "total rows"),
        [
            (
                str(s.snapshot_id),
                _time(s),
                s.operation,
                s.summary.get("added-records", ""),
                s.summary.get("total-records", ""),
            )
            for s in listed.snapshots
        ],
    )


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = commands.add_parser("results", help=list_results.__doc__)
    listing.add_argument("execution_id")
    listing.set_defaults(run=list_results)
    paging = commands.add_parser("page", help=page.__doc__)
    paging.add_argument("execution_id")
    paging.add_argument("operator_id")
    paging.add_argument("--columns", default="", help="comma-separated columns (default: all)")
    paging.add_argument("--filter", default="", help='for example: "amount > 10"')
    paging.add_argument("--size", type=int, default=20, help="rows (default 20)")
    paging.add_argument("--skip", type=int, default=0, help="rows to skip first")
    paging.add_argument("--page-token", default="", help="from the previous page")
    paging.add_argument("--snapshot", type=int, default=0, help="snapshot id to read")
    paging.set_defaults(run=page)
    listing_snapshots = commands.add_parser("snapshots", help=snapshots.__doc__)
    listing_snapshots.add_argument("execution_id")
    listing_snapshots.add_argument("operator_id")
    listing_snapshots.set_defaults(run=snapshots)
