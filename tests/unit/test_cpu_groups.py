"""Which cgroups the process launcher's units get: found from the kernel's tables (both
cgroup versions), and the setting's modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from service_runtime.config import ConfigError
from unit_launcher import cpu_groups
from unit_launcher.cpu_groups import UNITS_GROUP, CpuGroupsUnavailable, cpu_groups_for

V1_MOUNTS = (
    "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
)
V1_OWN = "5:memory:/lake\n4:cpu,cpuacct:/system.slice/registry.service\n0::/\n"


@pytest.fixture
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    mounts, own = tmp_path / "mountinfo", tmp_path / "cgroup"
    monkeypatch.setattr(cpu_groups, "_MOUNTS", mounts)
    monkeypatch.setattr(cpu_groups, "_OWN_GROUPS", own)
    return mounts, own


def test_v1_units_go_under_the_registrys_own_cpu_group(tables: tuple[Path, Path]) -> None:
    mounts, own = tables
    mounts.write_text(V1_MOUNTS)
    own.write_text(V1_OWN)
    base, version = cpu_groups._v1_base()
    assert base == Path(f"/sys/fs/cgroup/cpu,cpuacct/system.slice/registry.service/{UNITS_GROUP}")
    assert (version.weight_file, version.per_core) == ("cpu.shares", 1024)


def test_without_a_cpu_controller_nothing_is_found(tables: tuple[Path, Path]) -> None:
    mounts, own = tables
    mounts.write_text("32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    own.write_text("5:memory:/lake\n")
    with pytest.raises(
        CpuGroupsUnavailable, match=r"no cgroup2 file system.*no cgroup file system with cpu"
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
