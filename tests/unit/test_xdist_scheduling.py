"""The test scheduler: a file at a time, files sharing a stack together."""

from __future__ import annotations

from types import SimpleNamespace

from xdist.scheduler import LoadFileScheduling

from tests.xdist_scheduling import SHARED_STACK_FILES, StackSharingScheduling, make_scheduler


def _scheduler() -> StackSharingScheduling:
    return StackSharingScheduling.__new__(StackSharingScheduling)


def test_files_sharing_a_stack_are_one_work_unit_and_others_one_each() -> None:
    scheduler = _scheduler()
    [(group, files)] = SHARED_STACK_FILES.items()
    scopes = {scheduler._split_scope(f"tests/integration/{f}::test_x[1]") for f in files}
    assert scopes == {group}
    assert scheduler._split_scope("tests/unit/test_a.py::test_b[x::y]") == "tests/unit/test_a.py"


def test_it_is_xdists_loadfile_scheduling_with_the_same_scope_split() -> None:
    """Fails when pytest-xdist moves the method this relies on."""
    assert "_split_scope" in vars(LoadFileScheduling)
    assert LoadFileScheduling._split_scope(None, "tests/a.py::t") == "tests/a.py"


def test_only_loadfile_is_replaced() -> None:
    def config(dist: str) -> SimpleNamespace:
        return SimpleNamespace(getvalue=lambda name: dist)

    assert make_scheduler(config("load"), None) is None
