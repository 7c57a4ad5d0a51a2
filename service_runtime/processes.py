"""Child processes that cannot outlive their parent (the stack, or the registry for units).

Each child runs in its own process group with its output in a log file. On
Linux it also gets a parent-death signal, so that even a stack killed with
SIGKILL leaves no process behind. Stopping sends the child's stop signal to
its whole group, waits, then kills what is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
# Looked up here, once: between fork and exec the child may not load anything (another thread
# of the parent may have held the dynamic loader's lock at the fork, and nobody releases it).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent(signum: int) -> Callable[[], None]:
    def set_parent_death_signal() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signum)

    return set_parent_death_signal


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The unprivileged system user name (no login, no home of its own), created on first
    use; needs root."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    created = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=False,
        capture_output=True,
    )
    # 9: another process created the same user at the same time.
    if created.returncode not in (0, 9):
        raise ProcessFailed(f"cannot create system user {name}: {created.stderr.decode()[:300]}")
    return pwd.getpwnam(name)


def remove_system_user(name: str) -> None:
    """Removes the system user name (and its group) if it exists; needs root. userdel refuses
    while a process runs as the user: what still does (its owner should have ended them all)
    is killed, and userdel tried again. ProcessFailed if the user remains."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    deadline = time.monotonic() + 5.0
    while True:
        removed = subprocess.run(["userdel", name], check=False, capture_output=True)
        # 6: removed meanwhile; 8: the user is still logged in (its processes run).
        if removed.returncode not in (0, 6, 8):
            raise ProcessFailed(
                f"cannot remove system user {name}: {removed.stderr.decode()[:300]}"
            )
        if removed.returncode != 8 or time.monotonic() > deadline:
            break
        kill_processes_of(uid)
        time.sleep(0.05)  # killed processes are gone once reaped
    if _user_exists(name):
        raise ProcessFailed(f"system user {name} remains: {removed.stderr.decode()[:300]}")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def kill_processes_of(uid: int) -> None:
    """Kills every process whose real, effective, saved or file-system user is uid."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uids = next(line for line in status.read_text().splitlines() if line[:4] == "Uid:")
            if str(uid) in uids.split()[1:]:
                os.kill(int(status.parent.name), signal.SIGKILL)
        except (OSError, StopIteration):  # ended meanwhile
            continue


def let_others_traverse(folders: Iterable[Path]) -> None:
    """Lets every user pass through folders (execute bit only: they may list nothing), so that
    a process of another user reaches what lies below."""
    for folder in folders:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


def run_as(user: str | None) -> dict[str, Any]:
    """Popen arguments that run a child as user with only that user's group (without
    the group change, a child of root keeps root's group and its permissions)."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


class ProcessFailed(RuntimeError):
    """A child could not start or exited early; the message ends with its log's tail."""


class ManagedProcess:
    """One child process of the stack."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._stop_signal = stop_signal
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            try:
                self._popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=dict(env) if env is not None else None,
                    **run_as(user),
                    start_new_session=True,
                    preexec_fn=_die_with_parent(stop_signal),  # noqa: PLW1509 - only calls prctl
                )
            except OSError as exc:
                raise ProcessFailed(f"{name}: cannot start {argv[0]}: {exc.strerror}") from exc

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (negative: the signal that ended it)."""
        return self._popen.poll()

    def running(self) -> bool:
        return self._popen.poll() is None

    def check_running(self) -> None:
        """Raises ProcessFailed with the log's tail if the child has exited."""
        if not self.running():
            raise ProcessFailed(
                f"{self.name} exited with status {self._popen.returncode}; "
                f"the end of {self.log_path}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """Kills the child and its process group at once."""
        self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """Stops the child and everything in its process group."""
        if self.running():
            self._signal_group(self._stop_signal)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._popen.wait()
        # The leader is gone; make sure nothing it started lingers in its group.
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signum)


def wait_until(
    ready: Callable[[], bool], process: ManagedProcess, timeout: float, what: str
) -> None:
    """Polls ready() until it is true; fails early if the process exits, or at the timeout."""
    deadline = time.monotonic() + timeout
    while not ready():
        process.check_running()
        if time.monotonic() > deadline:
            raise ProcessFailed(
                f"{what} was not ready after {timeout:.0f} s; "
                f"the end of {process.log_path}:\n{process.log_tail()}"
            )
        time.sleep(0.1)
