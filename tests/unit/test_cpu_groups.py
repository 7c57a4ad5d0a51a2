"""Which cgroups the process launcher's units get: found from the kernel's tables (both
cgroup versions), and the setting's modes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from service_runtime.config import ConfigError
from unit_launcher import cgroups, cpu_groups
from unit_launcher.cgroups import LEFTOVER_AGE_SECONDS, CgroupsUnavailable
from unit_launcher.cpu_groups import cpu_groups_for

V1_MOUNTS = (
    "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
)
V1_OWN = "5:memory:/lake\n4:cpu,cpuacct:/system.slice/registry.service\n0::/\n"


@pytest.fixture
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    mounts, own = tmp_path / "mountinfo", tmp_path / "cgroup"
    monkeypatch.setattr(cgroups, "_MOUNTS", mounts)
    monkeypatch.setattr(cgroups, "_OWN_GROUPS", own)
    return mounts, own


def test_v1_units_go_under_the_registrys_own_cpu_group(tables: tuple[Path, Path]) -> None:
    mounts, own = tables
    mounts.write_text(V1_MOUNTS)
    own.write_text(V1_OWN)
    base, version = cpu_groups._v1_base()
    assert base == Path("/sys/fs/cgroup/cpu,cpuacct/system.slice/registry.service")
    assert (version.weight_file, version.per_core) == ("cpu.shares", 1024)


def test_without_a_cpu_controller_nothing_is_found(tables: tuple[Path, Path]) -> None:
    mounts, own = tables
    mounts.write_text("32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    own.write_text("5:memory:/lake\n")
    with pytest.raises(
        CgroupsUnavailable, match=r"no cgroup2 file system.*no cgroup file system with cpu"
    ):
        cpu_groups.CpuGroups.find()


def test_the_modes(tables: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mounts, own = tables
    mounts.write_text("")
    own.write_text("")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert cpu_groups_for("off", "SETTING") is None
    assert cpu_groups_for("auto", "SETTING") is None  # said in the log, not an error
    with pytest.raises(ConfigError, match=r"^SETTING is on, but no cgroup can be made"):
        cpu_groups_for("on", "SETTING")


def test_a_units_group_is_weighted_by_its_cores_beside_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: dict[Path, str] = {}
    monkeypatch.setattr(cpu_groups, "write", written.__setitem__)
    groups = cpu_groups.CpuGroups(tmp_path, cpu_groups._V1)

    groups.place("cu-a", 2, 101)
    assert written == {
        tmp_path / "texera-lake-unit-cu-a" / "cpu.shares": "2048",
        tmp_path / "texera-lake-unit-cu-a" / "cgroup.procs": "101",
    }
    groups.remove("cu-a")
    assert not groups.group_of("cu-a").exists()
    groups.remove("cu-a")  # twice: nothing to do


def test_groups_an_earlier_registry_left_empty_are_removed(tmp_path: Path) -> None:
    """A registry that was killed could not remove its units' groups: the next one removes
    those with no process left, once they are older than a unit's start could make them."""
    groups = cpu_groups.CpuGroups(tmp_path, cpu_groups._V1)
    old = time.time() - LEFTOVER_AGE_SECONDS - 60
    left, in_use, just_made = (groups.group_of(unit) for unit in ("cu-left", "cu-busy", "cu-new"))
    for group in (left, in_use, just_made, tmp_path / "a-group-of-another-kind"):
        group.mkdir()
    (in_use / "cgroup.procs").write_text("101\n")  # a directory rmdir refuses, like a busy group
    for group in (left, in_use, tmp_path / "a-group-of-another-kind"):
        os.utime(group, (old, old))

    assert groups.remove_leftovers() == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "a-group-of-another-kind",
        "texera-lake-unit-cu-busy",
        "texera-lake-unit-cu-new",
    ]
