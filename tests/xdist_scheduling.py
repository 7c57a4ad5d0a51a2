"""How pytest-xdist shares test files out among its workers: a file at a time (as with
--dist loadfile), except that files sharing a stack of their own go together, so that one
worker starts that stack once.

The one place that reaches into pytest-xdist's scheduler (its scope split, the way its own
LoadFileScheduling is written); tests/unit/test_xdist_scheduling.py fails if that moves.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

#: Test files that share a session stack besides the common one, by that stack's fixture.
SHARED_STACK_FILES = {
    "short_lived_stack": ("test_result_service.py", "test_s3_endpoint.py", "test_journey.py"),
}


def group_of(file_name: str) -> str:
    """The group a test file runs in: its shared stack's, else the file itself."""
    return next((g for g, files in SHARED_STACK_FILES.items() if file_name in files), file_name)


class StackSharingScheduling(LoadFileScheduling):  # type: ignore[misc]
    """LoadFileScheduling whose work units are groups (see group_of) instead of files."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        group = group_of(path.rsplit("/", 1)[-1])
        return path if group == path.rsplit("/", 1)[-1] else group


def make_scheduler(config: Any, log: Any) -> StackSharingScheduling | None:
    """The scheduler for --dist loadfile; None (xdist's own) for any other mode."""
    if config.getvalue("dist") != "loadfile":
        return None
    return StackSharingScheduling(config, log)
