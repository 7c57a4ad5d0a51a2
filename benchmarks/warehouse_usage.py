"""GetWarehouseUsage with a long history against a short one, measured in one run.

Two warehouses of one user on the embedded stack: one with SMALL ended executions, one with
LARGE. The executions are written straight into the registry's ledger (rows of the
`executions` table, moved from RUNNING to SUCCEEDED in one transaction), not run on Spark:
what is measured is the usage call, not the writes. Their end fires the same trigger a real
end does, and the registry's usage meter then reads each execution's tables from the catalog
as it would (three tables an execution; none exists here, so every figure is zero: the
figures' size does not change the call). Printed: how long the meter took for all of them,
and the median latency of CALLS usage calls on each warehouse, interleaved, straight to the
registry; their ratio large / small (1.0: the call does not grow with history).

Run: .venv/bin/python -m benchmarks.warehouse_usage [--small N] [--large N] [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid

import asyncpg

from benchmarks.shared import create_warehouse, metadata
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from texera.lake.v1 import usage_pb2, warehouse_service_pb2_grpc

#: The registration the ledger rows name; no process stands behind it.
UNIT_ID = "benchmark-unit"


async def _ledger_rows(database_url: str, warehouse_id: str, count: int) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        async with connection.transaction():
            await connection.execute(
                "INSERT INTO computing_units (computing_unit_id, endpoint, capacity, state, "
                "lease_expires_at) VALUES ($1, '127.0.0.1:1', 1000, 'HEALTHY', now()) "
                "ON CONFLICT DO NOTHING",
                UNIT_ID,
            )
            await connection.execute(
                "INSERT INTO executions (execution_id, owner_user_id, warehouse_id, "
                "computing_unit_id, workflow_id, workflow_fingerprint, state, started_at) "
                "SELECT $1 || '-' || n, 'bench', $2, $3, 'benchmark', '', 'RUNNING', now() "
                "FROM generate_series(1, $4) n",
                uuid.uuid4().hex[:12],
                uuid.UUID(warehouse_id),
                UNIT_ID,
                count,
            )
            await connection.execute(
                "UPDATE executions SET state = 'SUCCEEDED', ended_at = now() "
                "WHERE warehouse_id = $1 AND state = 'RUNNING'",
                uuid.UUID(warehouse_id),
            )
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(StackSettings(state_dir=state), ephemeral_ports=True) as stack,
    ):
        stub = warehouse_service_pb2_grpc.WarehouseServiceStub(stack.channel("warehouse-service"))
        who = metadata(stack, "warehouse-service")

        def usage(warehouse_id: str) -> usage_pb2.WarehouseUsage:
            request = usage_pb2.GetWarehouseUsageRequest(warehouse_id=warehouse_id)
            return stub.GetWarehouseUsage(request, metadata=who, timeout=60).warehouse_usage

        sizes = {"small": args.small, "large": args.large}
        warehouses = {
            name: create_warehouse(stack, stack.provision_bucket(f"usage-{name}")).warehouse_id
            for name in sizes
        }
        started = time.perf_counter()
        for name, count in sizes.items():
            asyncio.run(_ledger_rows(stack.database_url, warehouses[name], count))
        for name, count in sizes.items():
            while (now := usage(warehouses[name])).executions_pending or now.executions < count:
                time.sleep(0.2)
        read = time.perf_counter() - started
        print(f"the meter read {sum(sizes.values())} ended executions in {read:.1f} s")

        times: dict[str, list[float]] = {name: [] for name in sizes}
        for name in sizes:  # warm-up
            usage(warehouses[name])
        for _ in range(args.calls):
            for name in sizes:
                begun = time.perf_counter()
                usage(warehouses[name])
                times[name].append(time.perf_counter() - begun)
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, count in sizes.items():
            print(f"GetWarehouseUsage, {count:>6} executions: median {medians[name] * 1000:.2f} ms")
        print(
            f"ratio {args.large} / {args.small} executions: {medians['large'] / medians['small']:.2f}"
        )


if __name__ == "__main__":
    main()
