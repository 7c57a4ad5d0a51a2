"""A unit's warm-up: on a real SparkSession, it runs its jobs only while the unit has nothing
to do, in a job group of its own, and stops when told; in a unit of the embedded stack, it runs
in the unit's confined workers once the unit is idle, and executions run as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from cu_service.warm_up import WarmUp
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import filtered_numbers, new_user
from tests.integration.mesh import eventually
from texera.lake.v1 import execution_pb2

pytestmark = pytest.mark.integration

QUIET = 0.2


class Activity:
    """What a unit's manager would say: (running, queued, ever submitted)."""

    def __init__(self, running: int = 0, submitted: int = 0) -> None:
        self.running, self.submitted = running, submitted
        self._lock = threading.Lock()

    def __call__(self) -> tuple[int, int, int]:
        with self._lock:
            return self.running, 0, self.submitted

    def set(self, running: int, submitted: int) -> None:
        with self._lock:
            self.running, self.submitted = running, submitted


def warm_up_jobs(spark: SparkSession) -> list[int]:
    tracker = spark.sparkContext.statusTracker()
    return sorted(tracker.getJobIdsForGroup("warm-up"))


def test_it_runs_its_jobs_in_its_own_group_once_the_unit_is_quiet(spark: SparkSession) -> None:
    before = warm_up_jobs(spark)
    warm_up = WarmUp(spark, Activity(), jobs=2, quiet_seconds=QUIET)
    warm_up.start()
    eventually(lambda: warm_up.done == 2, "two warm-up jobs ran")
    warm_up.stop()
    jobs = [j for j in warm_up_jobs(spark) if j not in before]
    assert len(jobs) == 2
    tracker = spark.sparkContext.statusTracker()
    for job in jobs:
        info = tracker.getJobInfo(job)
        assert info is not None
        assert info.status == "SUCCEEDED"


def test_it_waits_while_executions_run_and_after_each_submission(spark: SparkSession) -> None:
    activity = Activity(running=1, submitted=1)
    warm_up = WarmUp(spark, activity, jobs=1, quiet_seconds=QUIET)
    warm_up.start()
    try:
        time.sleep(QUIET * 5)
        assert warm_up.done == 0  # an execution runs
        activity.set(running=0, submitted=1)
        activity.set(running=0, submitted=2)  # one more came and went within a quiet period
        started = time.monotonic()
        eventually(lambda: warm_up.done == 1, "the warm-up job ran")
        assert time.monotonic() - started >= QUIET  # not before a whole quiet period
    finally:
        warm_up.stop()


def test_stopping_ends_it_at_once_while_it_waits(spark: SparkSession) -> None:
    warm_up = WarmUp(spark, Activity(running=1, submitted=1), jobs=5, quiet_seconds=60)
    warm_up.start()
    started = time.monotonic()
    warm_up.stop()
    assert time.monotonic() - started < 5
    assert warm_up.done == 0


@pytest.fixture(scope="module")
def warming_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("warming")))
    env = {**TEST_STACK_ENV, "TEXERA_LAKE_CU_WARM_UP_JOBS": "3"}
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _unit_logs(stack: Stack) -> str:
    return "".join(
        path.read_text(errors="replace")
        for path in (stack.unit_root / "logs").rglob("*")
        if path.is_file()
    )


def test_a_unit_warms_up_once_idle_and_runs_executions_as_before(warming_stack: Stack) -> None:
    client, warehouse_id, _ = new_user(warming_stack, "warm")
    flow = filtered_numbers(100, 2, "id % 10 = 0")
    first = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert first.state == execution_pb2.EXECUTION_STATE_SUCCEEDED
    eventually(lambda: "warmed up: 3 jobs" in _unit_logs(warming_stack), "the unit warmed up", 120)
    second = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert second.state == execution_pb2.EXECUTION_STATE_SUCCEEDED
    assert [o.row_count for o in second.outputs] == [10]
    # The warm-up's jobs are not the execution's: its progress counts only its own.
    assert second.progress.stages_total == first.progress.stages_total
    assert second.progress.tasks_total == first.progress.tasks_total
