"""Each locally run unit's share of the machine's CPU: a control group of its own.

The kernel divides busy cores between threads; a unit whose JVM keeps every task thread busy
(a large write) would take the machine from units running one small task each, and from the
mesh's services, however few cores it asked for. In a cgroup per unit, weighted by its cores,
the busy unit gets its share and the others keep theirs, as Pods do by their CPU requests. A
unit's process is moved into its group as soon as it is started: long before it starts anything
(its interpreter is still loading), so everything it starts is in the group too. The group is
removed when the unit stops. The groups are made beside the registry, in its own cgroup
(``texera-lake-unit-<unit id>``), so that a unit weighs as much as as many busy threads as it
has cores, against the mesh's services and whatever else runs: a unit's unused share goes to
everything else, not to the other units alone (as it would in a folder of the units' groups).

Both cgroup versions: v2 (``cpu.weight``, 100 per core) where the cpu controller can be given
to the registry's subtree, else v1's cpu hierarchy (``cpu.shares``, 1024 per core). Needs
root (or a delegated subtree).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from service_runtime.config import ConfigError
from unit_launcher.cgroups import (
    GROUP_PREFIX,
    LEFTOVER_AGE_SECONDS,
    CgroupsUnavailable,
    v1_base,
    v2_base,
    write,
)

log = logging.getLogger("unit_launcher.cpu_groups")

#: Modes of TEXERA_LAKE_WAREHOUSE_UNIT_CPU_GROUPS.
MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class _Version:
    #: The file that sets a group's weight, and the weight of one core.
    weight_file: str
    per_core: int


_V2 = _Version("cpu.weight", 100)
_V1 = _Version("cpu.shares", 1024)


class CpuGroups:
    """The units' cgroups, beside the registry in its own cgroup."""

    def __init__(self, base: Path, version: _Version) -> None:
        self.base = base
        self._version = version

    @classmethod
    def find(cls) -> CpuGroups:
        """The units' groups' place: this process's own cgroup; CgroupsUnavailable if no
        group can be made there."""
        problems = []
        for finder in (_v2_base, _v1_base):
            try:
                base, version = finder()
                (base / "cgroup.procs").stat()
            except (OSError, CgroupsUnavailable) as exc:
                problems.append(str(exc))
                continue
            return cls(base, version)
        raise CgroupsUnavailable("; ".join(problems))

    def group_of(self, unit_id: str) -> Path:
        return self.base / f"{GROUP_PREFIX}{unit_id}"

    def place(self, unit_id: str, cores: int, pid: int) -> None:
        """Puts the process pid in the unit's group, made now and weighted by cores."""
        group = self.group_of(unit_id)
        group.mkdir(exist_ok=True)
        write(group / self._version.weight_file, str(max(1, cores) * self._version.per_core))
        write(group / "cgroup.procs", str(pid))

    def remove_leftovers(self) -> int:
        """Removes the units' groups beside this registry that are older than
        LEFTOVER_AGE_SECONDS and hold no process; how many. A younger one may be another
        registry's, made a moment ago for a unit it is putting in; the kernel refuses to
        remove one that holds a process."""
        removed = 0
        for group in self.base.glob(f"{GROUP_PREFIX}*"):
            try:
                if time.time() - group.stat().st_mtime < LEFTOVER_AGE_SECONDS:
                    continue
                group.rmdir()
            except OSError:  # in use (EBUSY), or removed meanwhile
                continue
            removed += 1
        return removed

    def remove(self, unit_id: str) -> None:
        """Removes the unit's group once its processes are gone (they may take a moment to
        leave it after they were killed)."""
        group = self.group_of(unit_id)
        for _ in range(50):
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY: a process is still in it
                time.sleep(0.02)
        log.warning("a unit's cgroup is still busy; left", extra={"unit_id": unit_id})


def _v2_base() -> tuple[Path, _Version]:
    return v2_base(("cpu",)), _V2


def _v1_base() -> tuple[Path, _Version]:
    return v1_base("cpu"), _V1


def cpu_groups_for(mode: str, setting: str) -> CpuGroups | None:
    """The units' cgroups as mode asks: "off" none; "auto" where this process may manage a
    cpu controller (run as root), else none, said once in the log; "on" or ConfigError
    naming setting."""
    if mode == "off" or (mode == "auto" and os.geteuid() != 0):
        return None
    try:
        groups = CpuGroups.find()
    except CgroupsUnavailable as exc:
        if mode == "on":
            raise ConfigError(f"{setting} is on, but no cgroup can be made: {exc}") from None
        log.info("units share the CPU without cgroups of their own", extra={"why": str(exc)})
        return None
    if removed := groups.remove_leftovers():
        log.info("removed units' cgroups an earlier registry left", extra={"groups": removed})
    return groups
