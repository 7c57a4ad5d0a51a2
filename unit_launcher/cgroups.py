"""The kernel's cgroup tables as the process launcher reads and writes them: where each
hierarchy is mounted, this process's own group in it, and a group's files.

Units' groups (``texera-lake-unit-<unit id>``) are made beside the registry, in its own group
of each hierarchy, by unit_launcher.cpu_groups (the CPU weight) and unit_launcher.unit_groups
(memory, processes and their end). On cgroup v2 a process is in one group only: both use the
same one.
"""

from __future__ import annotations

import os
from pathlib import Path

#: A unit's group is named this, then the unit's id.
GROUP_PREFIX = "texera-lake-unit-"
#: A unit's group older than this was left by a registry that ended without removing it
#: (killed): a group is made for a process about to be put in it, and removed once that
#: process has gone. A younger one may be another registry's, made a moment ago.
LEFTOVER_AGE_SECONDS = 600.0
_MOUNTS = Path("/proc/self/mountinfo")
_OWN_GROUPS = Path("/proc/self/cgroup")


class CgroupsUnavailable(Exception):
    """No cgroup this process may manage as asked; the message says what is missing."""


def write(path: Path, value: str) -> None:
    """Writes value to a cgroup file in one write, as the kernel wants it."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, value.encode())
    finally:
        os.close(descriptor)


def member_pids(group: Path) -> list[int]:
    """The processes in group (none once it is gone)."""
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def own_group(controller: str) -> str:
    """This process's cgroup path in the hierarchy of controller ("" for v2's)."""
    for line in _OWN_GROUPS.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise CgroupsUnavailable(f"this process is in no {controller or 'v2'} cgroup")


def mount_of(fstype: str, option: str) -> Path:
    """Where the cgroup file system of fstype (with option among its super options) is."""
    for line in _MOUNTS.read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        kind, _, options = tail.split(" ")[:3]
        if kind == fstype and (not option or option in options.split(",")):
            return Path(fields.split(" ")[4])
    raise CgroupsUnavailable(f"no {fstype} file system with {option or 'its controllers'}")


def v1_base(controller: str) -> Path:
    """This process's own group in v1's hierarchy of controller."""
    return mount_of("cgroup", controller) / own_group(controller).lstrip("/")


def v2_base(controllers: tuple[str, ...]) -> Path:
    """This process's own v2 group, its children given controllers."""
    own = mount_of("cgroup2", "") / own_group("").lstrip("/")
    given = (own / "cgroup.controllers").read_text().split()
    if missing := [name for name in controllers if name not in given]:
        raise CgroupsUnavailable(
            f"the cgroup v2 {' and '.join(missing)} controller is not given to this cgroup"
        )
    # Refused (EBUSY) unless this cgroup is the root or holds no process itself.
    write(own / "cgroup.subtree_control", " ".join(f"+{name}" for name in controllers))
    return own
