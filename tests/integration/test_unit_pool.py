"""The warm pool of computing units, on a stack of its own that keeps two: a pooled unit is
handed to a new user and runs their execution, the pool refills, a pooled unit that
crashes is replaced, two users asking at once get different units, a unit stopped when
idle takes a pooled one when it is needed again, and a user's idle unit ends its Python
worker daemon while pooled units keep theirs. (Pool size 0, as every other test's stack
has it, behaves as before: units start when asked for.)"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import workflow
from tests.integration.people import Person, person
from tests.integration.spark_processes import python_daemons, spark_jvms
from unit_launcher.process import unit_user

pytestmark = pytest.mark.integration

POOL_SIZE = 2
IDLE_SECONDS = 30
PYTHON_IDLE_SECONDS = 3
SMALL = workflow([{"operator_id": "n", "range_source": {"end": 5}, "materialize": True}])


@pytest.fixture(scope="module")
def pool_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("pool")))
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_WAREHOUSE_UNIT_POOL_SIZE": str(POOL_SIZE),
        "TEXERA_LAKE_CU_WARM_UP_JOBS": "3",  # pooled units warm up before they wait
        "TEXERA_LAKE_WAREHOUSE_UNIT_IDLE_SECONDS": str(IDLE_SECONDS),
        "TEXERA_LAKE_CU_PYTHON_IDLE_SECONDS": str(PYTHON_IDLE_SECONDS),
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def pooled(stack: Stack) -> dict[str, int]:
    """The pooled units not yet handed over, and their processes."""
    return {
        pid_file.stem: int(pid_file.read_text())
        for pid_file in (stack.unit_root / "logs").glob("pool-*.pid")
    }


def ready(stack: Stack, pool_id: str) -> bool:
    return (stack.unit_root / pool_id / "secrets" / "hand-over.ready").exists()


def full_pool(stack: Stack, *, without: frozenset[str] = frozenset()) -> dict[str, int]:
    """Waits until the pool holds POOL_SIZE ready units, none of them in without."""
    deadline = time.monotonic() + 300
    while True:
        units = pooled(stack)
        if (
            len(units) == POOL_SIZE
            and not without & set(units)
            and all(ready(stack, pool_id) for pool_id in units)
        ):
            return units
        assert time.monotonic() < deadline, f"the pool holds {units}"
        time.sleep(0.5)


def unit_daemons(unit_pid: int) -> list[psutil.Process]:
    """The Python worker daemons in a unit's process tree."""
    jvms = spark_jvms(psutil.Process(unit_pid))
    return [daemon for jvm in jvms for daemon in python_daemons(jvm)]


def run_small(someone: Person) -> str:
    """Runs a small workflow; the unit it ran on."""
    submitted = someone.executions.submit(someone.warehouse_id, SMALL)
    assert state_name(someone.executions.finish(submitted.execution_id)) == "SUCCEEDED"
    return submitted.computing_unit_id


def test_a_pooled_unit_runs_a_new_users_execution_and_the_pool_refills(
    pool_stack: Stack,
) -> None:
    before = full_pool(pool_stack)
    ann = person(pool_stack, "ann")
    unit_id = run_small(ann)
    handle = pool_stack.unit_for(ann.user_id)
    assert handle.unit_id == unit_id
    assert handle.pid in before.values()  # a pooled process, not a new one
    [pool_id] = [pool_id for pool_id, pid in before.items() if pid == handle.pid]

    # Now the user's unit, known by its id alone; nothing waits on its pipe any more.
    assert pool_id not in pooled(pool_stack)
    assert not (pool_stack.unit_root / pool_id / "secrets" / "hand-over").exists()
    unit = psutil.Process(handle.pid)
    if os.geteuid() == 0:  # its own OS user, which no other unit has
        assert unit.username() == unit_user(pool_id)
    environ = Path(f"/proc/{handle.pid}/environ").read_bytes()
    assert b"CREDENTIAL=" not in environ

    # The pool is full again, with a new unit.
    assert full_pool(pool_stack, without=frozenset({pool_id})).keys().isdisjoint({pool_id})


def test_a_pooled_unit_that_crashes_before_hand_over_is_replaced(pool_stack: Stack) -> None:
    units = full_pool(pool_stack)
    crashed, pid = next(iter(units.items()))
    os.killpg(pid, signal.SIGKILL)
    replaced = full_pool(pool_stack, without=frozenset({crashed}))
    assert crashed not in replaced
    assert not (pool_stack.unit_root / crashed).exists()  # its home went with it
    # A user asking now gets a working unit.
    run_small(person(pool_stack, "bea"))


def test_two_users_asking_at_once_get_different_pooled_units(pool_stack: Stack) -> None:
    units = full_pool(pool_stack)
    cat, dan = person(pool_stack, "cat"), person(pool_stack, "dan")
    with ThreadPoolExecutor(2) as threads:
        ran_on = list(threads.map(run_small, [cat, dan]))
    assert ran_on[0] != ran_on[1]
    pids = {pool_stack.unit_for(someone.user_id).pid for someone in (cat, dan)}
    assert pids == set(units.values())


def test_a_unit_stopped_when_idle_takes_a_pooled_one_when_needed_again(pool_stack: Stack) -> None:
    eve = person(pool_stack, "eve")
    unit_id = run_small(eve)
    first = pool_stack.unit_for(eve.user_id).pid
    deadline = time.monotonic() + IDLE_SECONDS + 120
    while psutil.pid_exists(first) and psutil.Process(first).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the idle unit's process did not end"
        time.sleep(1)

    before = full_pool(pool_stack)
    assert run_small(eve) == unit_id  # the same unit, started again
    assert pool_stack.unit_for(eve.user_id).pid in before.values()


def test_a_users_idle_unit_ends_its_python_daemon_and_pooled_units_keep_theirs(
    pool_stack: Stack,
) -> None:
    full_pool(pool_stack)
    fay = person(pool_stack, "fay")
    unit_id = run_small(fay)
    unit_pid = pool_stack.unit_for(fay.user_id).pid
    deadline = time.monotonic() + PYTHON_IDLE_SECONDS + 60
    while unit_daemons(unit_pid):
        assert time.monotonic() < deadline, "the idle unit kept its Python worker daemon"
        time.sleep(0.5)

    # Pooled units wait far longer than that, warmed up, daemon and all.
    for pid in full_pool(pool_stack).values():
        assert len(unit_daemons(pid)) == 1
    # The unit's next execution starts a daemon again.
    assert run_small(fay) == unit_id
    assert pool_stack.unit_for(fay.user_id).pid == unit_pid
