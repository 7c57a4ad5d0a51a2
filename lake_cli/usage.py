"""`texera-lake usage …`: what a warehouse, or one execution, stores."""

from __future__ import annotations

import argparse

from lake_cli.connection import Connection
from lake_cli.render import table
from texera.lake.v1 import usage_pb2

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def readable_bytes(count: int) -> str:
    """count in the largest binary unit that keeps it at 1 or more, e.g. 1.5 GiB."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def _figures(usage: usage_pb2.StorageUsage) -> list[tuple[str, str]]:
    return [
        ("bytes", f"{usage.bytes} ({readable_bytes(usage.bytes)})"),
        ("data files", str(usage.data_files)),
        ("rows", str(usage.rows)),
        ("snapshots", str(usage.snapshots)),
        ("tables", str(usage.tables)),
    ]


def show(connection: Connection, args: argparse.Namespace) -> None:
    """Shows what a warehouse stores (bytes, data files, rows, snapshots, tables of its ended
    executions), or with --execution what one execution stores."""
    if args.execution:
        found = connection.warehouses.GetExecutionUsage(
            usage_pb2.GetExecutionUsageRequest(execution_id=args.execution),
            metadata=connection.metadata,
            timeout=60,
        ).execution_usage
        rows = [("execution", found.execution_id), ("warehouse", found.warehouse_id)]
        rows += _figures(found.usage)
        measured = found.measure_time.ToJsonString() if found.HasField("measure_time") else ""
        rows.append(("measured", measured))
        rows.append(("pending", "yes" if found.measurement_pending else "no"))
    else:
        summed = connection.warehouses.GetWarehouseUsage(
            usage_pb2.GetWarehouseUsageRequest(warehouse_id=args.warehouse_id),
            metadata=connection.metadata,
            timeout=60,
        ).warehouse_usage
        rows = [("warehouse", summed.warehouse_id), *_figures(summed.usage)]
        rows.append(("executions", str(summed.executions)))
        rows.append(("pending", str(summed.executions_pending)))
    table(("figure", "value"), rows)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    showing = commands.add_parser("usage", help=show.__doc__)
    which = showing.add_mutually_exclusive_group(required=True)
    which.add_argument("warehouse_id", nargs="?", help="the warehouse")
    which.add_argument("--execution", help="one execution instead of a whole warehouse")
    showing.set_defaults(run=show)
