"""The groups that bound each locally run unit, on a fake cgroup tree of both versions: the
limits they write, how they end a unit's processes, and which groups they remove."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from unit_launcher import cgroups, unit_groups
from unit_launcher.cgroups import GROUP_PREFIX, LEFTOVER_AGE_SECONDS, CgroupsUnavailable
from unit_launcher.unit_groups import UnitGroups, UnitGroupsV1, UnitGroupsV2, unit_groups_for

GIB = 1024**3


class FakeKernel:
    """Group files in a folder: a made group has the files of optional, and loses its files
    when removed; the unit's processes are the test's children put in it, until they end."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.optional: tuple[str, ...] = ()
        self.written: list[tuple[str, str]] = []
        self.children: list[subprocess.Popen[bytes]] = []
        make_folder = Path.mkdir

        def mkdir(path: Path, *args: object, **kwargs: bool) -> None:
            make_folder(path, *args, **kwargs)  # type: ignore[arg-type]
            if path.name.startswith(GROUP_PREFIX):
                for name in self.optional:
                    (path / name).touch()

        monkeypatch.setattr(Path, "mkdir", mkdir)
        monkeypatch.setattr(Path, "rmdir", shutil.rmtree)
        monkeypatch.setattr(unit_groups, "write", self.write)
        monkeypatch.setattr(unit_groups, "member_pids", self.member_pids)

    def write(self, path: Path, value: str) -> None:
        self.written.append((str(path.relative_to(self.root)), value))
        path.write_text(value)
        if path.name == "cgroup.kill":
            for child in self.children:
                child.kill()

    def member_pids(self, group: Path) -> list[int]:
        if not group.exists():
            return []
        return [child.pid for child in self.children if child.poll() is None]

    def start(self) -> int:
        """A process of the unit, ended only by a kill."""
        child = subprocess.Popen(["sleep", "60"])
        self.children.append(child)
        return child.pid


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKernel]:
    fake = FakeKernel(tmp_path, monkeypatch)
    yield fake
    for child in fake.children:
        child.kill()
        child.wait()


def v1(root: Path) -> UnitGroupsV1:
    bases = tuple(root / name for name in ("memory", "pids", "freezer"))
    for base in bases:
        base.mkdir()
    return UnitGroupsV1(bases, 300)


def test_v1_a_unit_gets_a_group_in_each_hierarchy_limited_and_its_process_in_each(
    kernel: FakeKernel,
) -> None:
    groups = v1(kernel.root)
    groups.make("cu-a", 2 * GIB)
    groups.add("cu-a", 101)
    unit = f"{GROUP_PREFIX}cu-a"
    assert kernel.written == [
        (f"memory/{unit}/memory.limit_in_bytes", str(2 * GIB)),
        (f"pids/{unit}/pids.max", "300"),
        (f"memory/{unit}/cgroup.procs", "101"),
        (f"pids/{unit}/cgroup.procs", "101"),
        (f"freezer/{unit}/cgroup.procs", "101"),
    ]


def test_v1_memory_and_swap_together_where_the_kernel_accounts_swap(kernel: FakeKernel) -> None:
    kernel.optional = ("memory.memsw.limit_in_bytes",)
    v1(kernel.root).make("cu-a", GIB)
    assert kernel.written[:2] == [  # the limit first: the kernel keeps memsw above it
        (f"memory/{GROUP_PREFIX}cu-a/memory.limit_in_bytes", str(GIB)),
        (f"memory/{GROUP_PREFIX}cu-a/memory.memsw.limit_in_bytes", str(GIB)),
    ]


def test_v1_ending_freezes_kills_every_process_thaws_and_removes_the_groups(
    kernel: FakeKernel,
) -> None:
    groups = v1(kernel.root)
    groups.make("cu-a", GIB)
    first, second = kernel.start(), kernel.start()
    groups.add("cu-a", first)
    kernel.written.clear()

    groups.end("cu-a")
    assert all(child.returncode == -9 for child in kernel.children), (first, second)
    freezer = f"freezer/{GROUP_PREFIX}cu-a/freezer.state"
    assert kernel.written[:2] == [(freezer, "FROZEN"), (freezer, "THAWED")]
    assert not any(list(path.iterdir()) for path in groups.bases)
    groups.end("cu-a")  # twice: nothing to do


def test_v2_one_group_limited_without_swap_and_killed_at_once(kernel: FakeKernel) -> None:
    kernel.optional = ("memory.swap.max", "cgroup.kill")
    base = kernel.root / "unified"
    base.mkdir()
    groups = UnitGroupsV2((base,), 500)
    groups.make("cu-b", 3 * GIB)
    groups.add("cu-b", kernel.start())
    groups.end("cu-b")
    unit = f"unified/{GROUP_PREFIX}cu-b"
    assert kernel.written == [
        (f"{unit}/memory.max", str(3 * GIB)),
        (f"{unit}/memory.swap.max", "0"),
        (f"{unit}/pids.max", "500"),
        (f"{unit}/cgroup.procs", str(kernel.children[0].pid)),
        (f"{unit}/cgroup.kill", "1"),
    ]
    assert kernel.children[0].returncode == -9
    assert list(base.iterdir()) == []


def test_v2_without_cgroup_kill_the_group_is_frozen_to_be_killed(kernel: FakeKernel) -> None:
    base = kernel.root / "unified"
    base.mkdir()
    groups = UnitGroupsV2((base,), 500)
    groups.make("cu-b", GIB)
    groups.add("cu-b", kernel.start())
    kernel.written.clear()
    groups.end("cu-b")
    freeze = f"unified/{GROUP_PREFIX}cu-b/cgroup.freeze"
    assert kernel.written[:2] == [(freeze, "1"), (freeze, "0")]
    assert kernel.children[0].returncode == -9


def test_a_group_that_cannot_be_made_leaves_nothing(kernel: FakeKernel) -> None:
    groups = v1(kernel.root)
    (groups.bases[2] / f"{GROUP_PREFIX}cu-a").write_text("")  # mkdir refused there
    with pytest.raises(FileExistsError):
        groups.make("cu-a", GIB)
    assert not (groups.bases[0] / f"{GROUP_PREFIX}cu-a").exists()


def test_groups_left_over_are_ended_and_removed_but_not_young_or_held_ones(
    kernel: FakeKernel,
) -> None:
    """A registry that was killed could not end its units: the next one ends what runs in
    their groups, once no registry holds them and they are older than a unit's start."""
    groups = v1(kernel.root)
    running_elsewhere = v1_beside(groups)
    running_elsewhere.make("cu-held", GIB)
    for name in ("cu-left", "cu-young"):
        for group in groups.groups_of(name):
            group.mkdir()
    kernel.start()  # still running in cu-left
    old = time.time() - LEFTOVER_AGE_SECONDS - 60
    for name in ("cu-left", "cu-held"):
        for group in groups.groups_of(name):
            os.utime(group, (old, old))

    assert groups.remove_leftovers() == 1
    assert kernel.children[0].returncode == -9
    assert sorted(path.name for path in groups.bases[0].iterdir()) == [
        f"{GROUP_PREFIX}cu-held",
        f"{GROUP_PREFIX}cu-young",
    ]
    running_elsewhere.end("cu-held")


def v1_beside(groups: UnitGroupsV1) -> UnitGroupsV1:
    """Another registry's groups in the same place."""
    return UnitGroupsV1(groups.bases, groups.processes)


def test_without_root_or_a_cgroup_file_system_units_are_not_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cgroups, "_MOUNTS", tmp_path / "mountinfo")
    monkeypatch.setattr(cgroups, "_OWN_GROUPS", tmp_path / "cgroup")
    (tmp_path / "mountinfo").write_text("")
    (tmp_path / "cgroup").write_text("0::/\n")
    with pytest.raises(CgroupsUnavailable, match=r"no cgroup2 file system.*no cgroup file"):
        UnitGroups.find(100)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert unit_groups_for(100) is None
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert unit_groups_for(100) is None
    assert [record.levelname for record in caplog.records] == ["WARNING", "WARNING"]
    assert "needs root" in str(caplog.records[-1].__dict__["why"])
