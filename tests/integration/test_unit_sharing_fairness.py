"""A shared unit divides its task slots between its users, and unsharing stops a guest.

A guest whose functions spin for minutes, in as many partitions as the unit has slots and more,
cannot hold the owner's small execution up: it takes under three times as long as it took alone
in the same run (a ratio, so a busy machine slows both), plus at most the interval at which
Spark looks whether a Python task was killed (KILL_CHECK_SECONDS: the taken slot is free only
once Spark has ended the task's worker). Unsharing the unit while the guest's
spinning execution runs cancels it within seconds, and none of its tasks' processes remain.
"""

from __future__ import annotations

import contextlib
import time

import psutil
import pytest

from embedded_stack.stack import Stack
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    UnitClient,
    new_user,
    udf,
    udf_workflow,
    unit_as,
    workflow,
)
from tests.integration.mesh import bearer, create_warehouse, user
from tests.integration.spark_processes import python_daemons, spark_jvms
from texera.lake.v1 import (
    computing_unit_service_pb2,
    computing_unit_service_pb2_grpc,
    execution_pb2,
)

pytestmark = pytest.mark.integration

EX = execution_pb2
#: How often Spark looks whether a Python task was killed (BasePythonRunner's MonitorThread,
#: not configurable): a slot taken back is free at most this long after the kill.
KILL_CHECK_SECONDS = 2.0
#: A function whose every partition spins (busy, never sleeping) for ten minutes.
SPIN = udf(
    "import time\n"
    "def process(batches):\n"
    "    end = time.monotonic() + 600\n"
    "    while time.monotonic() < end:\n"
    "        pass\n"
    "    yield from batches\n",
    [("id", "bigint")],
)
SMALL = workflow([{"operator_id": "n", "range_source": {"end": 3}, "materialize": True}])


def owner_client(stack: Stack) -> tuple[UnitClient, str]:
    grant = stack.provision_bucket("unit-owner")
    warehouse = create_warehouse(user(stack, SHARED_UNIT_OWNER), grant)
    return unit_as(stack, SHARED_UNIT_OWNER), warehouse.warehouse_id


def timed(client: UnitClient, warehouse_id: str) -> float:
    """Seconds from submitting the small workflow to its end, which must be a success."""
    started = time.monotonic()
    ended = client.finish(client.submit(warehouse_id, SMALL).execution_id, timeout=600)
    took = time.monotonic() - started
    assert ended.state == EX.EXECUTION_STATE_SUCCEEDED, ended.error
    return took


def spinning(client: UnitClient, warehouse_id: str, partitions: int) -> str:
    """Starts the spinning workflow and waits until it runs; returns its execution's id."""
    flow = udf_workflow("spin", SPIN, end=partitions, partitions=partitions)
    execution_id = client.submit(warehouse_id, flow).execution_id
    running = client.wait_for_state(execution_id, EX.EXECUTION_STATE_RUNNING)
    assert running.state == EX.EXECUTION_STATE_RUNNING, running
    return execution_id


def task_processes(stack: Stack) -> list[psutil.Process]:
    """The processes the unit's Python worker daemons forked (workers and their tasks)."""
    unit = stack.unit_for(SHARED_UNIT_OWNER)
    daemons = [d for jvm in spark_jvms(psutil.Process(unit.pid)) for d in python_daemons(jvm)]
    return [child for daemon in daemons for child in daemon.children(recursive=True)]


def busy_tasks(stack: Stack) -> list[psutil.Process]:
    """Task processes burning CPU now: the spinning functions."""
    processes = task_processes(stack)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.cpu_percent(None)  # starts its count
    time.sleep(1.0)
    busy = []
    for process in processes:
        try:
            if process.cpu_percent(None) > 50:
                busy.append(process)
        except psutil.Error:
            pass
    return busy


@pytest.mark.timeout(900)
def test_a_guest_saturating_the_unit_leaves_the_owner_its_share(stack: Stack) -> None:
    owner, owner_warehouse = owner_client(stack)
    guest, guest_warehouse, _ = new_user(stack, "spinner")
    timed(owner, owner_warehouse)  # warms the owner's path up (its pool, its namespace)
    alone = min(timed(owner, owner_warehouse) for _ in range(2))

    spinner = spinning(guest, guest_warehouse, partitions=4)
    try:
        time.sleep(3)  # the guest's tasks take every slot
        loaded = timed(owner, owner_warehouse)
        print(f"the owner's small execution: {alone:.2f} s alone, {loaded:.2f} s beside the guest")
        assert loaded <= 3 * alone + KILL_CHECK_SECONDS, (alone, loaded)
        # The guest still runs: its tasks were taken back, not failed.
        assert guest.get(spinner).state == EX.EXECUTION_STATE_RUNNING
    finally:
        guest.cancel(spinner)
        guest.finish(spinner, timeout=120)


@pytest.mark.timeout(900)
def test_unsharing_cancels_what_the_guest_runs_and_ends_its_tasks(stack: Stack) -> None:
    unit = stack.unit_for(SHARED_UNIT_OWNER)
    guest, guest_warehouse, _ = new_user(stack, "evicted")
    spinner = spinning(guest, guest_warehouse, partitions=2)
    deadline = time.monotonic() + 60
    while not busy_tasks(stack):
        assert time.monotonic() < deadline, "the guest's tasks never started spinning"

    channel = stack.channel("gateway", presenting=None)
    computing_unit_service_pb2_grpc.ComputingUnitServiceStub(channel).UnshareComputingUnit(
        computing_unit_service_pb2.UnshareComputingUnitRequest(
            computing_unit_id=unit.unit_id, user_id=guest.user_id
        ),
        metadata=bearer(stack.token(SHARED_UNIT_OWNER)),
        timeout=60,
    )
    channel.close()
    unshared = time.monotonic()

    ended = guest.finish(spinner, timeout=120)
    took = time.monotonic() - unshared
    assert ended.state == EX.EXECUTION_STATE_CANCELLED, ended
    assert ended.error.reason == "COMPUTING_UNIT_UNSHARED", ended.error
    assert not ended.outputs or all(o.row_count == 0 for o in ended.outputs)
    assert took < 30, f"cancelled {took:.1f} s after unsharing"
    deadline = time.monotonic() + 30
    while busy := busy_tasks(stack):
        assert time.monotonic() < deadline, f"still spinning: {busy}"
