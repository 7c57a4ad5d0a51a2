"""The groups that bound a locally run unit, on this machine's kernel: ending a unit ends every
process it started, one that left its process group and session included, and leaves neither
group nor OS user; and a unit's memory file systems count against its memory limit."""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from service_runtime.processes import ManagedProcess, ensure_system_user, remove_system_user
from unit_launcher.cgroups import CgroupsUnavailable
from unit_launcher.process import unit_user
from unit_launcher.unit_groups import UnitGroups

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
SHM = Path("/dev/shm")  # the machine's memory file system, as a task's covering ones


@pytest.fixture
def groups() -> UnitGroups:
    if os.geteuid() != 0:
        pytest.skip("units' cgroups are made by a registry run as root")
    try:
        return UnitGroups.find(processes=64)
    except CgroupsUnavailable as exc:
        pytest.skip(f"no cgroup for units can be made here: {exc}")


@pytest.fixture
def name() -> Iterator[str]:
    """A unit id of the test's own; whatever it leaves in /dev/shm is removed."""
    unit_id = f"cu-test-{secrets.token_hex(6)}"
    yield unit_id
    for path in SHM.glob(f"{unit_id}*"):
        path.unlink()


#: Forks a daemon (a session of its own, its parent gone, so reparented) that keeps a file in
#: /dev/shm holding its pid; then waits to be stopped.
ESCAPING = """
import os, sys, time
time.sleep(0.3)  # the launcher puts the process in its groups meanwhile
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as out:
            out.write(str(os.getpid()) + "x" * 1_000_000)
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def _wait_for(ready: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_ending_a_unit_ends_a_daemon_it_left_and_its_user_goes(
    groups: UnitGroups, name: str, tmp_path: Path
) -> None:
    user = unit_user(name)
    ensure_system_user(user)
    groups.make(name, 256 * MIB)
    marker = SHM / name
    unit = ManagedProcess(
        name,
        [sys.executable, "-c", ESCAPING, str(marker)],
        tmp_path / "unit.log",
        user=user,
        stop_signal=signal.SIGTERM,
    )
    try:
        groups.add(name, unit.pid)
        _wait_for(marker.exists)
        daemon = psutil.Process(int(marker.read_text().rstrip("x")))
        assert daemon.ppid() != unit.pid
        assert os.getsid(daemon.pid) != os.getsid(unit.pid)

        unit.stop(timeout=2)  # its process group only: the daemon left it
        assert daemon.is_running()
        groups.end(name)
        _wait_for(lambda: not daemon.is_running() or daemon.status() == psutil.STATUS_ZOMBIE)
        assert not any(group.exists() for group in groups.groups_of(name))

        remove_system_user(user)
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
    finally:
        unit.kill()
        groups.end(name)
        remove_system_user(user)


#: Fills a file in /dev/shm a MiB at a time, up to 512 MiB; says how far it got.
FILLING = """
import sys
with open(sys.argv[1], "wb") as out:
    for mib in range(512):
        out.write(b"x" * 1024 * 1024)
        out.flush()
print("wrote all", flush=True)
"""


def test_a_units_memory_file_systems_count_against_its_memory_limit(
    groups: UnitGroups, name: str, tmp_path: Path
) -> None:
    """A task's covering file systems are memory file systems: what it writes there is the
    unit's memory, and the kernel stops the unit going past its limit."""
    groups.make(name, 64 * MIB)
    filler = ManagedProcess(
        name,
        [sys.executable, "-c", f"import time; time.sleep(0.3)\n{FILLING}", str(SHM / name)],
        tmp_path / "filler.log",
    )
    try:
        groups.add(name, filler.pid)
        _wait_for(lambda: not filler.running(), 30)
        assert filler.returncode != 0, filler.log_tail()
        assert "wrote all" not in filler.log_tail()
        assert (SHM / name).stat().st_size <= 64 * MIB
    finally:
        filler.kill()
        groups.end(name)
