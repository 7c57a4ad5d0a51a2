"""What the benchmarks share: a user's warehouse on the embedded stack, executions, and ways
to measure time, CPU and memory."""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

import psutil
from google.protobuf import json_format
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from service_runtime.auth import bearer
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2_grpc,
    workflow_pb2,
)

USER = "bench"
#: Benchmarks measure the mesh, not the gateway's per-user rate limit.
UNLIMITED = {
    "TEXERA_LAKE_GATEWAY_RATE_PER_SECOND": "1000000",
    "TEXERA_LAKE_GATEWAY_RATE_BURST": "1000000",
}


#: Services as they run by default, recording no spans (the embedded stack logs them unless
#: told otherwise).
UNTRACED = {"TEXERA_LAKE_TRACE_CONSOLE": "false"}


class ExecutionFailed(SystemExit):
    """An execution did not succeed, or gave other rows than it should have. Uncaught, it ends
    the benchmark with its message, as SystemExit does; a benchmark that goes on after
    failures catches it."""


def metadata(stack: Stack, part: str) -> tuple[tuple[str, str]]:
    """What the benchmark's user presents when calling part directly."""
    return (bearer(stack.token_for(part, USER)),)


#: Four columns (about 45 bytes a row in Arrow), cheap to compute, so writing dominates.
FOUR_COLUMNS = (
    {"expression": "id"},
    {"expression": "id % 97", "alias": "bucket"},
    {"expression": "id * 0.5", "alias": "half"},
    {"expression": "concat('row-', id)", "alias": "label"},
)


def range_then(
    workflow_id: str, numbers: dict[str, int], operator_id: str, operator: dict[str, Any]
) -> workflow_pb2.Workflow:
    """A workflow of two operators: a range (`numbers`: its RangeSource fields), then the
    operator given (its kind and settings) reading it, materialized as result operator_id."""
    return json_format.ParseDict(
        {
            "workflow_id": workflow_id,
            "operators": [
                {"operator_id": "numbers", "range_source": numbers},
                {
                    "operator_id": operator_id,
                    "input_operator_ids": ["numbers"],
                    **operator,
                    "materialize": True,
                },
            ],
        },
        workflow_pb2.Workflow(),
    )


def plan(rows: int, columns: Sequence[dict[str, str]] = FOUR_COLUMNS) -> workflow_pb2.Workflow:
    """rows rows of a range, projected to columns, materialized as result `rows`."""
    return range_then(
        "benchmark",
        {"end": rows, "partitions": 8},
        "rows",
        {"projection": {"columns": list(columns)}},
    )


def create_warehouse(stack: Stack, grant: BucketGrant) -> warehouse_pb2.Warehouse:
    stub = warehouse_service_pb2_grpc.WarehouseServiceStub(stack.channel("warehouse-service"))
    request = create_warehouse_request(grant, name="benchmark")
    return stub.CreateWarehouse(
        request, metadata=metadata(stack, "warehouse-service"), timeout=60
    ).warehouse


@dataclass(frozen=True)
class Lake:
    """A running embedded stack with one warehouse of USER, in a bucket of its own."""

    stack: Stack
    grant: BucketGrant
    warehouse: warehouse_pb2.Warehouse


@contextlib.contextmanager
def lake(service_env: dict[str, str] | None = None, *, tls: bool = True) -> Iterator[Lake]:
    """The embedded stack in a temporary folder, its services run with service_env; over
    TLS, as by default, unless tls is False."""
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(
            StackSettings(state_dir=state, tls=tls), ephemeral_ports=True, service_env=service_env
        ) as stack,
    ):
        grant = stack.provision_bucket(USER)
        yield Lake(stack, grant, create_warehouse(stack, grant))


def run_execution(
    stack: Stack, warehouse_id: str, flow: workflow_pb2.Workflow
) -> tuple[float, execution_pb2.Execution]:
    stub = execution_service_pb2_grpc.ExecutionServiceStub(
        stack.channel("gateway", presenting=None)
    )
    started = time.perf_counter()
    submitted = stub.SubmitExecution(
        execution_service_pb2.SubmitExecutionRequest(warehouse_id=warehouse_id, workflow=flow),
        metadata=metadata(stack, "gateway"),
        timeout=600,
    ).execution
    final = None
    watch = execution_service_pb2.WatchExecutionRequest(execution_id=submitted.execution_id)
    for event in stub.WatchExecution(watch, metadata=metadata(stack, "gateway"), timeout=3600):
        final = event.execution
    elapsed = time.perf_counter() - started
    assert final is not None
    if final.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
        raise ExecutionFailed(f"the execution did not succeed: {final.error}")
    return elapsed, final


def user_catalog(stack: Stack, warehouse: warehouse_pb2.Warehouse, name: str) -> RestCatalog:
    """The warehouse's catalog, as pyiceberg in the user's own process sees it."""
    return RestCatalog(
        name,
        uri=f"{stack.catalog_url}/catalog",
        warehouse=warehouse.catalog_warehouse_name,
        token=stack.catalog_token(),
    )


def timed(action: Callable[[], object], runs: int) -> float:
    """The median time of runs calls, after one untimed warm-up call."""
    action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleaved(actions: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """The median time of each action over runs rounds that call every action once in turn
    (so that drift in the machine's speed touches all alike), after one untimed round."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    for round_number in range(runs + 1):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            if round_number:
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(taken) for name, taken in times.items()}


def cpu_seconds(action: Callable[[], object], *pids: int) -> list[float]:
    """The CPU time (user and system) each of the processes spends while action runs once."""
    processes = [psutil.Process(pid) for pid in pids]

    def used() -> list[float]:
        return [sum(p.cpu_times()[:2]) for p in processes]

    before = used()
    action()
    return [after - earlier for after, earlier in zip(used(), before, strict=True)]


def settled(quiet_share: float = 0.05, window: float = 2.0, longest: float = 300.0) -> float:
    """Waits until the processes this one started (the stack, its units) use, together, less
    than quiet_share of one core over window seconds: a new unit has warmed up
    (TEXERA_LAKE_CU_WARM_UP_JOBS) and its JVM has compiled what it was compiling. Returns the
    seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < longest:
        processes = psutil.Process().children(recursive=True)
        before = [process_cpu(p) for p in processes]
        time.sleep(window)
        # A process that ended meanwhile reads 0: it counts as nothing, not as minus its life's
        # CPU (which made a busy stack look quiet whenever one of its processes ended).
        used = sum(
            max(0.0, process_cpu(p) - earlier) for p, earlier in zip(processes, before, strict=True)
        )
        if used < quiet_share * window:
            break
    return time.monotonic() - started


def process_cpu(process: psutil.Process) -> float:
    """CPU seconds a process has used, with those of its ended children it has reaped; 0 once
    it has ended."""
    try:
        return sum(process.cpu_times()[:4])  # its own and its ended children's
    except psutil.Error:  # it ended meanwhile
        return 0.0


class Sampler:
    """Calls sample() every interval seconds, on a thread of its own, while in use."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            self.sample()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


class PeakMemory(Sampler):
    """Samples a process's resident memory every 10 ms while in use."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.01)
        self._process = psutil.Process(pid)
        self.before = self.peak = self._process.memory_info().rss

    def sample(self) -> None:
        self.peak = max(self.peak, self._process.memory_info().rss)
