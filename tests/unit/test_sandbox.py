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
from cu_service.sandbox import Layer, Sandbox, _layers
from service_runtime.processes import let_others_traverse

needs_namespaces = pytest.mark.skipif(
    sandbox.available() is not None, reason="no user namespaces here"
)

NOBODY = 65534
#: A task that reports what it sees, then leaves sleeping children behind.
TASK = r"""
import ctypes, json, os, resource, sys
from cu_service.sandbox import Layer, Sandbox, _layers
from service_runtime.processes import let_others_traverse
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


def test_a_folder_that_holds_what_tasks_run_is_covered_and_what_they_run_shown_again() -> None:
    interpreter_home = str(Path(sys.base_prefix).resolve().parent)
    box = Sandbox.for_unit(interpreter_home, 1 << 20, 8)
    assert (interpreter_home, Layer.COVER) in box.layers
    shown = str(Path(sys.base_prefix).resolve())
    assert box.layers.index((shown, Layer.SHOW)) > box.layers.index((interpreter_home, Layer.COVER))
    assert box.home == interpreter_home  # covered by a file system of its own: the task's home


def test_a_checkout_under_tmp_is_shown_again_and_the_unit_inside_it_covered_again() -> None:
    checkout = "/tmp/c"
    unit = f"{checkout}/.stack/units/u"
    layers = _layers(
        hidden={"/tmp", "/dev/shm", unit, f"{unit}/tmp", f"{unit}/spark"},
        needed={f"{checkout}/.venv", checkout, "/usr"},
    )
    assert layers == (
        ("/tmp", Layer.COVER),
        ("/dev/shm", Layer.COVER),
        (checkout, Layer.SHOW),
        (unit, Layer.COVER),
    )


@needs_namespaces
def test_a_task_sees_only_itself_and_leaves_nothing_behind() -> None:
    # Run as an unprivileged user, as tasks are: the process limit does not bind root.
    demote = os.geteuid() == 0
    if demote:  # as the stack does for its units' users
        let_others_traverse(Path(sys.executable).resolve().parents)
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


#: A task of a unit whose checkout (interpreter, packages, code, the unit's home) lies in /tmp.
TASK_IN_TMP = r"""
import json, os, sys
from cu_service.sandbox import Sandbox
home = sys.argv[1]
status = Sandbox.for_unit(home, 4 << 20, 12).run_task()
if status is not None:
    sys.exit(status)
print(json.dumps({
    "home": os.path.isdir(home) and sorted(os.listdir(home)),
    "code": os.path.isfile(os.path.join(os.path.dirname(home), "cu_service", "sandbox.py")),
    "read_only": [bool(os.statvfs(p).f_flag & os.ST_RDONLY) for p in (sys.prefix, os.environ["PYTHONPATH"])],
}), flush=True)
os._exit(0)
"""


@needs_namespaces
def test_a_unit_checked_out_under_tmp_runs_its_code_read_only_and_hides_its_home() -> None:
    demote = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="checkout-", dir="/tmp") as folder:
        checkout = Path(folder)
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(checkout / "venv")], check=True
        )
        (checkout / "cu_service").mkdir()
        (checkout / "cu_service" / "__init__.py").write_text("")
        (checkout / "cu_service" / "sandbox.py").write_text(Path(sandbox.__file__).read_text())
        home = checkout / "unit"
        (home / "secrets").mkdir(parents=True)
        (home / "secrets" / "credential").write_text("not for users' code")
        for path in (checkout, *checkout.rglob("*")):
            if path.is_symlink():
                continue  # the venv's interpreter: a link to the one this test runs
            path.chmod(0o755 if path.is_dir() else 0o644)
            if demote and path.is_relative_to(home):
                os.chown(path, NOBODY, NOBODY)
        if demote:
            let_others_traverse(Path(sys.executable).resolve().parents)
        done = subprocess.run(
            [str(checkout / "venv" / "bin" / "python"), "-c", TASK_IN_TMP, str(home)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
            env={"PYTHONPATH": str(checkout), "PATH": os.environ["PATH"]},
            user=NOBODY if demote else None,
            group=NOBODY if demote else None,
            extra_groups=[] if demote else None,
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Covered again within the shown checkout: the task's own home, holding its TMPDIR alone.
    assert seen["home"] == ["tmp"], "the unit's home is covered within the shown checkout"
    assert seen["code"] is True, "the unit's code is in view"
    assert seen["read_only"] == [True, True], "the interpreter's and the code's folders"
