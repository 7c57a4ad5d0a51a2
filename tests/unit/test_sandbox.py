"""A task's sandbox (cu_service.sandbox), entered by a real process: what the task sees, the
limits it meets, and what is left of it once it ends.

Entered in a child interpreter of its own: a user namespace can only be entered by a process
with one thread. Skipped where the kernel refuses unprivileged user namespaces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from cu_service import sandbox
from cu_service.sandbox import Sandbox

needs_namespaces = pytest.mark.skipif(
    sandbox.available() is not None, reason="no user namespaces here"
)

NOBODY = 65534
#: A task that reports what it sees, then leaves sleeping children behind.
TASK = r"""
import ctypes, json, os, resource, sys
from cu_service.sandbox import Sandbox
home, marker = sys.argv[1], sys.argv[2]
status = Sandbox.for_unit(home, 4 << 20, 12).run_task()
if status is not None:
    sys.exit(status)
libc = ctypes.CDLL(None, use_errno=True)
forks = 0
try:
    for _ in range(50):
        if os.fork() == 0:
            import time
            time.sleep(60)
            os._exit(0)
        forks += 1
except BlockingIOError:
    pass
print(json.dumps({
    "pid": os.getpid(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) == 1),
    "others": [p for p in os.listdir("/proc") if p.isdigit() and int(p) > forks + 1],
    "home": sorted(os.listdir(home)) if os.path.isdir(home) else None,
    "tmpdir": os.environ["TMPDIR"],
    "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "forks": forks,
    "unmounted": libc.umount2(b"/proc", 2) == 0,
}), flush=True)
os._exit(0)
"""


def test_a_unit_home_inside_a_shared_folder_is_covered_with_it(tmp_path: Path) -> None:
    home = tmp_path / "unit"
    home.mkdir()
    box = Sandbox.for_unit(str(home), 1 << 20, 8)
    assert box.home == str(Path("/tmp").resolve())  # the covered /tmp: no unit path made again
    assert str(Path("/tmp").resolve()) in box.hidden
    assert not [f for f in box.hidden if f.startswith(box.hidden[0] + os.sep)]
    assert Sandbox.for_unit("/no/such/home", 1 << 20, 8).home == str(Path("/tmp").resolve())


def test_a_folder_that_holds_what_tasks_run_is_never_covered() -> None:
    interpreter_home = str(Path(sys.base_prefix).resolve().parent)
    box = Sandbox.for_unit(interpreter_home, 1 << 20, 8)
    for needed in (sys.base_prefix, sys.prefix):
        resolved = str(Path(needed).resolve())
        assert not [f for f in box.hidden if resolved == f or resolved.startswith(f + os.sep)]
    assert box.home != interpreter_home


@needs_namespaces
def test_a_task_sees_only_itself_and_leaves_nothing_behind() -> None:
    # Run as an unprivileged user, as tasks are: the process limit does not bind root.
    demote = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="unit-") as folder:
        home = Path(folder)
        home.chmod(0o755)
        (home / "secrets").mkdir()
        (home / "secrets" / "credential").write_text("not for users' code")
        if demote:
            os.chown(home, NOBODY, NOBODY)
        marker = f"sandbox-test-{uuid.uuid4().hex}"
        done = subprocess.run(
            [sys.executable, "-c", TASK, str(home), marker],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
            user=NOBODY if demote else None,
            group=NOBODY if demote else None,
            extra_groups=[] if demote else None,
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["pid"] == 1
    assert seen["others"] == []
    assert seen["home"] is None  # covered by /tmp's cover: the unit's home is not there
    assert seen["tmpdir"] == str(Path("/tmp").resolve() / "tmp")
    assert seen["processes"] == 12
    assert 0 < seen["forks"] < 12
    assert seen["unmounted"] is False
    # The children it left sleeping ended with it.
    left = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and marker.encode() in _cmdline(pid)
    ]
    assert left == []


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
