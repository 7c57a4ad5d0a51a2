"""Each locally run unit bounded as a whole, in control groups of its own: its memory, its
processes and threads, and their end.

A process put in a cgroup stays there, and so does every process it starts, whatever it does
(forking twice, a session or namespaces of its own): moving a process to another group takes
write access to that group's files, which only root has. So, for everything a unit runs,
users' code included:

- one memory limit counts all the unit holds, the memory file systems its tasks write into
  included (the kernel charges a page of one to the group of the process that wrote it);
  past it the kernel reclaims, then ends a process of the unit;
- one limit counts its processes and threads;
- ending the unit ends every process in its groups: v2's ``cgroup.kill`` at once; without it
  (cgroup v1, v2 before Linux 5.14) the group is frozen, every process in it killed and the
  group thawed, until none is left (frozen, no process can fork meanwhile).

The groups (``texera-lake-unit-<unit id>``) are made before the unit's process starts, so that
the unit is told whether it is bounded (one that is not runs its owner's executions only), and
removed once its processes are gone. They are made beside the registry, in its own group: on
cgroup v2 one group with the memory and pids controllers (the one unit_launcher.cpu_groups
weights too), on v1 one in each of the memory, pids and freezer hierarchies. The registry holds
a lock (``flock``) on each of its units' groups for as long as it runs them: a group that no
registry holds and that is older than LEFTOVER_AGE_SECONDS was left by a registry that was
killed, and the next one to start ends what still runs in it and removes it. Needs root.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import fcntl
import logging
import os
import signal
import time
from pathlib import Path

from unit_launcher.cgroups import (
    GROUP_PREFIX,
    LEFTOVER_AGE_SECONDS,
    CgroupsUnavailable,
    member_pids,
    v1_base,
    v2_base,
    write,
)

log = logging.getLogger("unit_launcher.unit_groups")

#: How long ending a unit's processes may take before its groups are left, busy.
END_SECONDS = 10.0
#: How long a group may take to freeze before its processes are killed anyway (a process in
#: an uninterruptible sleep freezes once it wakes; killed, it ends then too).
FREEZE_SECONDS = 1.0
_V1_HIERARCHIES = ("memory", "pids", "freezer")
_V2_CONTROLLERS = ("memory", "pids")


class Freezing(enum.Enum):
    """What a group's processes are let do."""

    FROZEN = "FROZEN"
    THAWED = "THAWED"


class UnitGroups(abc.ABC):
    """The units' bounding groups, beside the registry in its own groups; each unit's
    processes limited to processes (the processes and threads in its groups at once)."""

    def __init__(self, bases: tuple[Path, ...], processes: int) -> None:
        self.bases = bases
        self.processes = processes
        #: Open descriptors of the groups this registry holds, by the name they were made for.
        self._held: dict[str, list[int]] = {}

    @staticmethod
    def find(processes: int) -> UnitGroups:
        """The groups of this process's cgroup version, beside it; CgroupsUnavailable if
        none can be made there."""
        problems = []
        for version in (UnitGroupsV2, UnitGroupsV1):
            try:
                groups = version.beside_this_process(processes)
                for base in groups.bases:
                    (base / "cgroup.procs").stat()
            except (OSError, CgroupsUnavailable) as exc:
                problems.append(str(exc))
                continue
            return groups
        raise CgroupsUnavailable("; ".join(problems))

    @classmethod
    @abc.abstractmethod
    def beside_this_process(cls, processes: int) -> UnitGroups:
        """This version's groups beside this process; CgroupsUnavailable or OSError if it has
        none to make them in."""

    def groups_of(self, name: str) -> list[Path]:
        """name's groups, one per hierarchy."""
        return [base / f"{GROUP_PREFIX}{name}" for base in self.bases]

    def make(self, name: str, memory_bytes: int) -> None:
        """Makes name's groups, limited to memory_bytes and to self.processes, and holds
        them until end(name); OSError (and nothing made) if a group cannot be made."""
        self.end(name)  # what an earlier launch under the same name left
        try:
            for group in self.groups_of(name):
                group.mkdir()
                self._held.setdefault(name, []).append(_hold(group))
            for path, value in self._limits(name, memory_bytes).items():
                write(path, value)
        except OSError:
            self.end(name)
            raise

    def add(self, name: str, pid: int) -> None:
        """Puts the process pid (and so all it starts from then on) in name's groups."""
        for group in self.groups_of(name):
            write(group / "cgroup.procs", str(pid))

    def end(self, name: str) -> None:
        """Ends every process in name's groups, then removes them (left, and said in the log,
        if a process outlives END_SECONDS)."""
        members = self._members(name)
        deadline = time.monotonic() + END_SECONDS
        while member_pids(members) and time.monotonic() < deadline:
            self._kill(name)
            time.sleep(0.01)  # killed processes take a moment to leave their groups
        for group in self.groups_of(name):
            try:
                group.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:  # EBUSY: a process outlived the kill
                log.warning(
                    "a unit's cgroup still holds a process; left",
                    extra={"group": str(group), "why": exc.strerror},
                )
        _release(self._held.pop(name, []))

    def remove_leftovers(self) -> int:
        """Ends what runs in the units' groups beside this registry that no registry holds and
        that are older than LEFTOVER_AGE_SECONDS, and removes them; how many units' groups."""
        names = {
            group.name.removeprefix(GROUP_PREFIX)
            for base in self.bases
            for group in base.glob(f"{GROUP_PREFIX}*")
        }
        claimed = [name for name in sorted(names) if self._claim(name)]
        for name in claimed:
            self.end(name)
        return len(claimed)

    def _claim(self, name: str) -> bool:
        """Holds name's groups if they are left over: no registry holds them, and they are
        older than a unit's start could make them."""
        held: list[int] = []
        try:
            for group in self.groups_of(name):
                if group.exists():
                    held.append(_hold(group))
        except OSError:  # held by a registry (EWOULDBLOCK), or removed meanwhile
            _release(held)
            return False
        now = time.time()
        if any(now - os.fstat(descriptor).st_mtime < LEFTOVER_AGE_SECONDS for descriptor in held):
            _release(held)
            return False
        self._held[name] = held
        return True

    def _kill(self, name: str) -> None:
        """Kills every process in name's groups; they may take a moment to leave them."""
        self._freeze(name, Freezing.FROZEN)
        try:
            for pid in member_pids(self._members(name)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            self._freeze(name, Freezing.THAWED)

    def _freeze(self, name: str, state: Freezing) -> None:
        """Lets name's processes run or freezes them (waiting up to FREEZE_SECONDS for it)."""
        self._ask_freezing(name, state)
        deadline = time.monotonic() + FREEZE_SECONDS
        while state is Freezing.FROZEN and not self._frozen(name):
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)

    @abc.abstractmethod
    def _limits(self, name: str, memory_bytes: int) -> dict[Path, str]:
        """The files that limit name's groups and their values, in the order to write them."""

    @abc.abstractmethod
    def _members(self, name: str) -> Path:
        """The group of name whose ``cgroup.procs`` lists every process of the unit."""

    @abc.abstractmethod
    def _ask_freezing(self, name: str, state: Freezing) -> None:
        """Asks the kernel to freeze or thaw name's processes."""

    @abc.abstractmethod
    def _frozen(self, name: str) -> bool:
        """Whether every process of name is frozen."""


class UnitGroupsV1(UnitGroups):
    """cgroup v1: a group in each of the memory, pids and freezer hierarchies."""

    @classmethod
    def beside_this_process(cls, processes: int) -> UnitGroups:
        return cls(tuple(v1_base(name) for name in _V1_HIERARCHIES), processes)

    def _limits(self, name: str, memory_bytes: int) -> dict[Path, str]:
        memory, pids, _ = self.groups_of(name)
        limits = {memory / "memory.limit_in_bytes": str(memory_bytes)}
        # Present where the kernel accounts swap: memory and swap together, so no swap.
        if (memory / "memory.memsw.limit_in_bytes").exists():
            limits[memory / "memory.memsw.limit_in_bytes"] = str(memory_bytes)
        limits[pids / "pids.max"] = str(self.processes)
        return limits

    def _members(self, name: str) -> Path:
        return self.groups_of(name)[2]

    def _ask_freezing(self, name: str, state: Freezing) -> None:
        with contextlib.suppress(FileNotFoundError):
            write(self._members(name) / "freezer.state", state.value)

    def _frozen(self, name: str) -> bool:
        try:
            return (self._members(name) / "freezer.state").read_text().strip() == "FROZEN"
        except FileNotFoundError:
            return True


class UnitGroupsV2(UnitGroups):
    """cgroup v2: one group with the memory and pids controllers."""

    @classmethod
    def beside_this_process(cls, processes: int) -> UnitGroups:
        return cls((v2_base(_V2_CONTROLLERS),), processes)

    def _limits(self, name: str, memory_bytes: int) -> dict[Path, str]:
        [group] = self.groups_of(name)
        limits = {group / "memory.max": str(memory_bytes)}
        if (group / "memory.swap.max").exists():  # where the kernel accounts swap
            limits[group / "memory.swap.max"] = "0"
        limits[group / "pids.max"] = str(self.processes)
        return limits

    def _members(self, name: str) -> Path:
        return self.groups_of(name)[0]

    def _kill(self, name: str) -> None:
        kill = self._members(name) / "cgroup.kill"
        if kill.exists():
            write(kill, "1")
        else:
            super()._kill(name)

    def _ask_freezing(self, name: str, state: Freezing) -> None:
        with contextlib.suppress(FileNotFoundError):
            write(self._members(name) / "cgroup.freeze", "1" if state is Freezing.FROZEN else "0")

    def _frozen(self, name: str) -> bool:
        try:
            events = (self._members(name) / "cgroup.events").read_text().splitlines()
        except FileNotFoundError:
            return True
        return "frozen 1" in events


def _hold(group: Path) -> int:
    """An open descriptor of group, locked: BlockingIOError if another process holds it. Not
    inherited by children (os.open's descriptors are not), so it ends with this process."""
    descriptor = os.open(group, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def _release(held: list[int]) -> None:
    for descriptor in held:
        os.close(descriptor)


def unit_groups_for(processes: int) -> UnitGroups | None:
    """The units' bounding groups, each unit's limited to processes; None (said in the log,
    with why: units then run their owners' executions only) where they cannot be made.
    Ends what earlier registries left in theirs first."""
    try:
        if os.geteuid() != 0:
            raise CgroupsUnavailable("making them needs root")
        groups = UnitGroups.find(processes)
    except CgroupsUnavailable as exc:
        log.warning(
            "units run without cgroups bounding their memory and processes, so each runs its "
            "owner's executions only",
            extra={"why": str(exc)},
        )
        return None
    if removed := groups.remove_leftovers():
        log.info("ended units' cgroups an earlier registry left", extra={"groups": removed})
    return groups
