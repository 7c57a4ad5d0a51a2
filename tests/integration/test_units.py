"""Computing units as users' own resources: created, shared, routed to, stopped when idle,
deleted; and what a workflow on one can reach (nothing of the mesh's or of other units').

Runs on a stack of its own whose units stop after a short idle time."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import psutil
import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import filtered_numbers, slow_workflow, udf, workflow
from tests.integration.mesh import bad_fields, reason, refused
from tests.integration.people import person
from texera.lake.v1 import (
    computing_unit_service_pb2,
    execution_pb2,
    workflow_pb2,
)
from unit_launcher.cgroups import GROUP_PREFIX
from unit_launcher.cpu_groups import cpu_groups_for
from unit_launcher.process import unit_user
from unit_launcher.unit_groups import UnitGroups, UnitGroupsV1
from unit_launcher.unit_memory import unit_memory_bytes

pytestmark = pytest.mark.integration

cus = computing_unit_service_pb2
IDLE_SECONDS = 20


@pytest.fixture(scope="module")
def units_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("units")))
    env = {**TEST_STACK_ENV, "TEXERA_LAKE_WAREHOUSE_UNIT_IDLE_SECONDS": str(IDLE_SECONDS)}
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


SMALL = workflow([{"operator_id": "n", "range_source": {"end": 5}, "materialize": True}])


def test_the_default_unit_is_made_on_first_use_and_stops_when_idle(units_stack: Stack) -> None:
    ann = person(units_stack, "ann")
    assert ann.listed() == []
    first = ann.executions.submit(ann.warehouse_id, SMALL)
    assert state_name(ann.executions.finish(first.execution_id)) == "SUCCEEDED"
    [default] = ann.listed()
    assert default.default_unit
    assert default.computing_unit_id == first.computing_unit_id
    assert default.owner_user_id == ann.user_id
    assert default.state == cus.COMPUTING_UNIT_STATE_RUNNING
    pid = units_stack.unit_for(ann.user_id).pid

    # Idle for IDLE_SECONDS: stopped by the registry, its process gone.
    deadline = time.monotonic() + IDLE_SECONDS + 60
    while ann.unit(default.computing_unit_id).state != cus.COMPUTING_UNIT_STATE_STOPPED:
        assert time.monotonic() < deadline
        time.sleep(1)
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline + 30  # stopping lets its calls drain first
        time.sleep(0.5)

    # The next submission starts it again and waits for it.
    again = ann.executions.submit(ann.warehouse_id, SMALL)
    assert again.computing_unit_id == default.computing_unit_id
    assert state_name(ann.executions.finish(again.execution_id)) == "SUCCEEDED"
    assert ann.unit(default.computing_unit_id).state == cus.COMPUTING_UNIT_STATE_RUNNING
    assert len(ann.listed()) == 1


def own_group(pid: int, controller: str) -> str:
    """The cgroup of pid in the hierarchy with controller, as the kernel tells."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    by_controllers = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in lines}
    v1 = [path for names, path in by_controllers.items() if controller in names.split(",")]
    return v1[0] if v1 else by_controllers[""]


def test_a_unit_runs_in_cgroups_of_its_own_weighted_and_bounded_by_its_size(
    units_stack: Stack,
) -> None:
    """The stack runs as root here (as the isolation tests need): every process of a unit (its
    driver, its JVM) is in the unit's cgroups, weighted by its two cores and limited to its
    memory budget; the groups and the unit's OS user go when the unit does."""
    groups = cpu_groups_for("auto", "TEXERA_LAKE_WAREHOUSE_UNIT_CPU_GROUPS")
    if groups is None:
        pytest.skip("units get cgroups of their own when run as root where cgroups can be made")
    bounds = UnitGroups.find(processes=1)
    cy = person(units_stack, "cy")
    unit = cy.create_unit("two cores", cores=2)
    handle = units_stack.unit_for(cy.user_id, unit.computing_unit_id)
    group = groups.group_of(unit.computing_unit_id)
    tree = [psutil.Process(handle.pid), *psutil.Process(handle.pid).children(recursive=True)]
    # An ended process not reaped yet (Spark's launcher shell) has left every cgroup.
    processes = [process for process in tree if process.status() != psutil.STATUS_ZOMBIE]
    assert any(process.name() == "java" for process in processes)
    for process in processes:
        for controller in ("cpu", "memory", "pids"):
            assert own_group(process.pid, controller).endswith(f"/{group.name}")
    weight = {"cpu.shares": "2048", "cpu.weight": "200"}
    assert any(
        (group / name).exists() and (group / name).read_text().strip() == value
        for name, value in weight.items()
    )
    memory = bounds.groups_of(unit.computing_unit_id)[0]
    limit = "memory.limit_in_bytes" if isinstance(bounds, UnitGroupsV1) else "memory.max"
    assert (memory / limit).read_text().strip() == str(unit_memory_bytes(2, 1024))
    # The mesh's own services are not in any unit's group.
    assert GROUP_PREFIX not in own_group(os.getpid(), "cpu")

    cy.delete(unit.computing_unit_id, force=True)
    left = [group, *bounds.groups_of(unit.computing_unit_id)]
    deadline = time.monotonic() + 120
    while any(path.exists() for path in left) or has_user(unit_user(unit.computing_unit_id)):
        assert time.monotonic() < deadline, "the unit's cgroups or OS user outlived it"
        time.sleep(0.5)


def has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


#: Grouping shuffles rows between tasks, compressed: Spark's JVM unpacks its native
#: compression library into its temporary folder to do so.
SHUFFLING = workflow(
    [
        {"operator_id": "n", "range_source": {"end": 1000, "partitions": 2}},
        {
            "operator_id": "counts",
            "input_operator_ids": ["n"],
            "aggregate": {
                "group_by": ["id"],
                "aggregations": [{"function": "AGGREGATE_FUNCTION_COUNT", "alias": "rows"}],
            },
            "materialize": True,
        },
    ]
)


@pytest.mark.skipif(os.geteuid() != 0, reason="units run as users of their own only under root")
def test_a_unit_writes_nothing_of_its_own_in_the_machines_temporary_folder(
    units_stack: Stack,
) -> None:
    """The machine's /tmp is shared by every unit and outlives each, its user id then given to
    a later unit: a unit's JVM keeps its temporary files in the unit's home and writes no
    performance data (which the JVM puts in /tmp/hsperfdata_<user>, whatever its settings)."""
    dee = person(units_stack, "dee")
    done = dee.executions.finish(dee.executions.submit(dee.warehouse_id, SHUFFLING).execution_id)
    assert state_name(done) == "SUCCEEDED", done.error.message
    unit = psutil.Process(units_stack.unit_for(dee.user_id).pid)
    uid, started = unit.uids().real, unit.create_time()
    # Entries a unit that had this user id before left are older than this one.
    written = [
        entry.name
        for entry in Path("/tmp").iterdir()  # where the JVM puts them by default
        if (status := entry.lstat()).st_uid == uid and status.st_mtime >= started - 1
    ]
    assert written == []
    assert [output.row_count for output in done.outputs] == [1000]


def test_a_unit_is_used_only_by_its_owner_and_whom_it_is_shared_with(units_stack: Stack) -> None:
    owner, guest = person(units_stack, "owner"), person(units_stack, "guest")
    unit_id = owner.create_unit("team").computing_unit_id

    # Not shared: for the guest the unit does not exist.
    for call in (
        lambda: guest.executions.submit(guest.warehouse_id, SMALL, computing_unit_id=unit_id),
        lambda: guest.unit(unit_id),
        lambda: guest.delete(unit_id, force=True),
        lambda: guest.share(unit_id, guest.user_id),
    ):
        assert refused(call).code() == grpc.StatusCode.NOT_FOUND
    assert guest.listed() == []

    shared = owner.share(unit_id, guest.user_id)
    assert list(shared.shared_with_user_ids) == [guest.user_id]
    seen = guest.unit(unit_id)
    assert seen.owner_user_id == owner.user_id
    assert list(seen.shared_with_user_ids) == []  # who else may use it is the owner's business
    assert [u.computing_unit_id for u in guest.listed()] == [unit_id]

    # The guest runs on the owner's unit, into the guest's own warehouse only.
    ran = guest.executions.submit(guest.warehouse_id, SMALL, computing_unit_id=unit_id)
    assert ran.computing_unit_id == unit_id
    assert state_name(guest.executions.finish(ran.execution_id)) == "SUCCEEDED"
    assert guest.results.rows(ran.execution_id, "n")
    into_owners = refused(
        lambda: guest.executions.submit(owner.warehouse_id, SMALL, computing_unit_id=unit_id)
    )
    assert into_owners.code() == grpc.StatusCode.NOT_FOUND
    # The owner of the unit does not see the guest's execution.
    assert refused(lambda: owner.executions.get(ran.execution_id)).code() == (
        grpc.StatusCode.NOT_FOUND
    )
    # Only the owner changes the unit.
    for call in (
        lambda: guest.delete(unit_id),
        lambda: guest.share(unit_id, "someone-else"),
    ):
        assert refused(call).code() == grpc.StatusCode.PERMISSION_DENIED

    owner.share(unit_id, guest.user_id, share=False)
    after = refused(
        lambda: guest.executions.submit(guest.warehouse_id, SMALL, computing_unit_id=unit_id)
    )
    assert after.code() == grpc.StatusCode.NOT_FOUND
    assert guest.listed() == []
    owner.delete(unit_id)


def test_deleting_a_busy_unit_needs_force_and_cancels_its_executions(units_stack: Stack) -> None:
    dana = person(units_stack, "dana")
    unit_id = dana.create_unit("doomed").computing_unit_id
    busy = dana.executions.submit(dana.warehouse_id, slow_workflow(), computing_unit_id=unit_id)
    running = dana.executions.wait_for_state(
        busy.execution_id, execution_pb2.EXECUTION_STATE_RUNNING
    )
    assert state_name(running) == "RUNNING"

    refusal = refused(lambda: dana.delete(unit_id))
    assert refusal.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "force" in (refusal.details() or "")
    assert state_name(dana.executions.get(busy.execution_id)) == "RUNNING"

    deleted = dana.delete(unit_id, force=True)
    assert list(deleted.cancelled_execution_ids) == [busy.execution_id]
    ended = dana.executions.get(busy.execution_id)
    assert state_name(ended) == "CANCELLED"
    assert dana.results.list_results(busy.execution_id).results == []  # nothing half-written
    assert refused(lambda: dana.unit(unit_id)).code() == grpc.StatusCode.NOT_FOUND
    assert reason(refused(lambda: dana.delete(unit_id))) == "COMPUTING_UNIT_NOT_FOUND"
    repeated = cus.DeleteComputingUnitRequest(computing_unit_id=unit_id, allow_missing=True)
    assert dana.units.DeleteComputingUnit(repeated, metadata=dana.metadata, timeout=60) == (
        cus.DeleteComputingUnitResponse()
    )
    assert dana.listed() == []
    gone = refused(
        lambda: dana.executions.submit(dana.warehouse_id, SMALL, computing_unit_id=unit_id)
    )
    assert gone.code() == grpc.StatusCode.NOT_FOUND


def test_bad_unit_requests_name_the_field(units_stack: Stack) -> None:
    eve = person(units_stack, "eve")
    request = cus.CreateComputingUnitRequest(
        computing_unit=cus.ComputingUnit(display_name="", cores=0, memory_mib=10)
    )
    error = refused(lambda: eve.units.CreateComputingUnit(request, metadata=eve.metadata))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {
        "computing_unit.display_name",
        "computing_unit.cores",
        "computing_unit.memory_mib",
    }


@pytest.mark.parametrize("user_id", ["", "x" * 129, "bob\n"])
def test_sharing_a_unit_names_a_malformed_user_id(units_stack: Stack, user_id: str) -> None:
    """As ShareWarehouse names member.user_id: before any lookup, so a unit that does not
    exist is no different, and every bad field is named in the one error."""
    frank = person(units_stack, "frank")
    for share in (True, False):
        error = refused(partial(frank.share, "cu-0000000000000000", user_id, share=share))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_fields(error) == {"user_id"}
        assert reason(error) == "INVALID_ARGUMENT"
        both = refused(partial(frank.share, "not a unit", user_id, share=share))
        assert bad_fields(both) == {"computing_unit_id", "user_id"}


# Attacks: a workflow written by an attacker, on its own unit and on a unit shared with it.

ATTACK = """
import asyncio, os
import pyarrow as pa

NEEDLES = {needles!r}
FOLDERS = {folders!r}
DSN = {dsn!r}

def blobs():
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            for name in ('environ', 'cmdline'):
                try:
                    with open(f'/proc/{{pid}}/{{name}}', 'rb') as f:
                        yield f'/proc/{{pid}}/{{name}}', f.read()
                except OSError:
                    pass
    home = os.environ.get('HOME', '/nonexistent')
    for root in FOLDERS:
        for folder, dirs, files in os.walk(root):
            if folder.startswith(home):
                dirs[:] = []
                continue
            for name in files:
                path = os.path.join(folder, name)
                try:
                    with open(path, 'rb') as f:
                        yield path, f.read(1 << 16)
                except OSError:
                    pass

def database():
    async def connect():
        import asyncpg
        connection = await asyncpg.connect(DSN, timeout=10)
        await connection.close()
    try:
        asyncio.run(connect())
        return 'database: CONNECTED'
    except Exception as exc:
        return 'database: refused ' + type(exc).__name__

def process(batches):
    for _ in batches:
        pass
    findings, read = [], 0
    for path, blob in blobs():
        read += 1
        findings += [f'{{label}} in {{path}}' for label, needle in NEEDLES.items() if needle in blob]
    for root in FOLDERS:
        try:
            os.listdir(root)
            findings.append(f'listed {{root}}')
        except OSError:
            pass
    findings += [database(), f'read {{read}}']
    yield pa.RecordBatch.from_pydict({{'finding': findings}})
"""


def _secrets(stack: Stack) -> dict[str, bytes]:
    """What no workflow may find, read from the running stack."""
    password = stack.database_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    return {
        "jwt secret": stack.jwt_secret.encode(),
        "catalog encryption key": stack.catalog_key.encode(),
        "registry database url": stack.database_url.encode(),
        "catalog database url": stack.catalog_database_url.encode(),
        "database password": password.encode(),
        # Visible to the workflow on purpose: its own process's command line, that of Spark's
        # Python daemon it was forked from (proof that it searched /proc).
        "canary": b"cu_service.worker_daemon",
    }


def _attack(stack: Stack) -> workflow_pb2.Workflow:
    dsn = stack.database_url.split("://", 1)[1].split("@", 1)[1]
    code = ATTACK.format(
        needles=_secrets(stack),
        folders=[str(stack.state_dir), str(stack.unit_root)],
        dsn=f"postgresql://postgres@{dsn}",
    )
    return workflow(
        [
            {"operator_id": "n", "range_source": {"end": 1, "partitions": 1}},
            {
                "operator_id": "attack",
                "input_operator_ids": ["n"],
                "python_udf": udf(code, [("finding", "string")]),
                "materialize": True,
            },
        ]
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="units run as users of their own only under root")
def test_a_workflow_finds_no_secret_and_reaches_no_database(units_stack: Stack) -> None:
    victim, mallory = person(units_stack, "victim"), person(units_stack, "mallory")
    shared_id = victim.create_unit("shared").computing_unit_id
    victim.share(shared_id, mallory.user_id)
    work = victim.executions.submit(
        victim.warehouse_id, filtered_numbers(200_000, 4, "id % 3 = 0"), computing_unit_id=shared_id
    )

    for unit_id in ("", shared_id):  # mallory's own default unit, then the victim's shared one
        attack = mallory.executions.submit(
            mallory.warehouse_id, _attack(units_stack), computing_unit_id=unit_id
        )
        done = mallory.executions.finish(attack.execution_id)
        assert state_name(done) == "SUCCEEDED", done.error.message
        findings = [r["finding"] for r in mallory.results.rows(attack.execution_id, "attack")]
        leaks = [f for f in findings if " in /" in f and not f.startswith("canary")]
        assert leaks == [], leaks
        assert any(f.startswith("canary in /proc/") for f in findings)  # the search did search
        assert not [f for f in findings if f.startswith("listed ")]
        [database] = [f for f in findings if f.startswith("database: ")]
        assert database.startswith("database: refused"), database

    finished = victim.executions.finish(work.execution_id)
    assert state_name(finished) == "SUCCEEDED"
    kept = victim.results.list_results(work.execution_id).results
    assert [r.row_count for r in kept if r.operator_id == "kept"] == [66_667]
