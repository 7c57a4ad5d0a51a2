"""A task of users' code in Linux namespaces of its own: it sees no process but its own, no
file of the unit's, and holds no privilege.

pyspark's daemon forks the Python workers the JVM talks to. Such a worker (the keeper) never
runs users' code itself: for every task it forks the process that runs the task (the runner),
the first of a new PID namespace, in new mount and IPC namespaces, and waits for it to end.
Each task thus starts from a fresh copy of the keeper, whatever tasks the keeper served
before. The runner, before any of users' code runs:

- mounts a /proc of its own PID namespace: the unit's driver, its JVM, the daemon and every
  other task are not there to read (their memory, environment, command line, open files);
- covers the unit's home (its secrets, Spark's files of every execution, its temporary files,
  pyspark daemon's socket), the shared temporary folders and /dev/shm with empty file systems
  of its own, wherever the interpreter and the unit's code live: what the task must run and
  lies in a covered folder (a checkout under /tmp) is shown again, read-only, and whatever of
  the unit's lies within that is covered again. A cover or a showing that cannot be made
  fails the task before any of users' code runs;
- gives up every capability (the new user namespace granted them) and the means to regain one
  (no new privileges), and is not dumpable;
- counts its processes alone against the process limit (RLIMIT_NPROC is counted per user
  namespace), so that a fork bomb exhausts its own namespace, not the unit.

The keeper has a user namespace of its own, entered before its first task; the runner's outer
user is the keeper's (the unit's, or the workers' own when the unit runs as root), with the
same ids inside. When the runner ends, the kernel ends every process left in its namespace;
when the keeper is killed (Spark cancels the task), the runner gets SIGKILL.

Linux only, and only where unprivileged user namespaces are allowed: ``available()`` tells.
"""

from __future__ import annotations

import ctypes
import enum
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_NOATIME = 0x400
_MS_NODIRATIME = 0x800
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_RELATIME = 0x200000
_MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CLONE3 = 435  # the same number on every architecture
_LAST_CAPABILITY = 63

#: What a task runs: the interpreter, the packages and the unit's code (shown read-only where a
#: cover would hide them).
_NEEDED = (sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(__file__)))
#: Folders every user of the machine shares, covered too.
_SHARED = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 - covered, never written
#: A mount's flags that statvfs(2) reports (ST_*) and that a read-only remount of a showing
#: must keep (the kernel refuses to drop them in a user namespace), as mount(2)'s MS_* flags.
_KEPT_FLAGS = {
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: _MS_NOATIME,
    os.ST_NODIRATIME: _MS_NODIRATIME,
    os.ST_RELATIME: _MS_RELATIME,
}
_LIBC: Any = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_PYTHON: Any = ctypes.pythonapi
#: The user namespace of the process that imported this module (pyspark's daemon, before it
#: forks any keeper); a keeper still in it has not entered its own yet.
_DAEMONS_USER_NAMESPACE = os.readlink("/proc/self/ns/user") if _LIBC is not None else ""


class SandboxError(OSError):
    """A step of entering the sandbox failed; the message names it."""


class Layer(enum.Enum):
    """What the runner mounts on a folder."""

    #: An empty file system of the task's own.
    COVER = "cover"
    #: The folder as it is outside, read-only, back in view within a cover.
    SHOW = "show"


@dataclass(frozen=True)
class Sandbox:
    """What a task's runner covers up and shows again, and how much room its own temporary
    files get."""

    #: The task's home, in a covered folder: HOME, and TMPDIR below it.
    home: str
    #: What the runner mounts, in order: a folder's layer is mounted after those of the
    #: folders that hold it.
    layers: tuple[tuple[str, Layer], ...]
    #: Room for all the covers' files together (tmpfs pages count as the runner's memory,
    #: and the unit's).
    scratch_bytes: int
    #: Processes and threads the task may have at once.
    processes: int

    @classmethod
    def for_unit(cls, home: str, scratch_bytes: int, processes: int) -> Sandbox:
        """Covers the unit's home and temporary folders, Spark's and the folders every user
        of the machine shares, and shows again what the task runs where a cover hides it;
        the task's home is the unit's if covered by a file system of its own, else the
        covered /tmp."""
        hidden = _existing([home, os.environ.get("TMPDIR", ""), *_spark_dirs(), *_SHARED])
        layers = _layers(hidden, _existing(_NEEDED))
        covers = [path for path, layer in layers if layer is Layer.COVER]
        home = os.path.realpath(home) if home else ""
        if home not in covers:  # not made again within a covered folder: nothing to list
            home = next((f for f in covers if f == os.path.realpath(_SHARED[0])), "")
        return cls(home, layers, scratch_bytes, processes)

    @property
    def hidden(self) -> tuple[str, ...]:
        """The folders covered with an empty file system."""
        return tuple(path for path, layer in self.layers if layer is Layer.COVER)

    def run_task(self) -> int | None:
        """Called in the keeper for each task: forks the runner, the first process of a new
        PID namespace. Returns None in the runner, which goes on to run the task; in the
        keeper, waits for the runner and returns its exit status.

        The keeper enters a user namespace of its own before its first task, and keeps it: a
        new PID namespace, each task's, is then made without deepening any nesting, and the
        keeper (which never runs users' code) serves task after task."""
        if _user_namespace() == _DAEMONS_USER_NAMESPACE:
            _enter_user_namespace()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the daemon's SIG_IGN reaps on its own
        # Open while the keeper lives: the runner's parent lies outside its PID namespace, so
        # only this pipe tells it whether the keeper died before its death signal was set.
        alive, keeping = os.pipe()
        runner = _fork_into_new_pid_namespace()
        if runner == 0:
            os.close(keeping)
            _check(_LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
            os.set_blocking(alive, False)
            try:
                if os.read(alive, 1) == b"":
                    os._exit(1)
            except BlockingIOError:
                pass  # nothing to read, and the write end still open: the keeper lives
            os.close(alive)
            self._enter()
            return None
        os.close(alive)
        _, status = os.waitpid(runner, 0)
        os.close(keeping)
        return os.waitstatus_to_exitcode(status)

    def _enter(self) -> None:
        """The runner's confinement, in this order: mounts need the capabilities it then drops."""
        _check(_LIBC.unshare(_CLONE_NEWNS | _CLONE_NEWIPC), "unshare(mount and IPC namespaces)")
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        # Opened before any cover hides them: a showing is mounted from what is open.
        shown = {
            path: os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            for path, layer in self.layers
            if layer is Layer.SHOW
        }
        cover_bytes = max(1, self.scratch_bytes // max(1, len(self.hidden)))
        for folder, layer in self.layers:
            if layer is Layer.COVER:
                options = f"size={cover_bytes},mode=0700"
                _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
            else:
                _show_read_only(shown.pop(folder), folder)
        if self.home:
            temporary = os.path.join(self.home, "tmp")
            os.makedirs(temporary, exist_ok=True)
            os.environ["HOME"], os.environ["TMPDIR"] = self.home, temporary
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))
        _drop_capabilities()
        _check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no new privileges)")
        _check(_LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(not dumpable)")


def _spark_dirs() -> list[str]:
    return [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + os.sep)


def _existing(folders: Iterable[str]) -> set[str]:
    """The folders that exist, resolved."""
    return {os.path.realpath(f) for f in folders if f and os.path.isdir(f)}


def _layers(hidden: set[str], needed: set[str]) -> tuple[tuple[str, Layer], ...]:
    """The mounts that hide every hidden folder and keep every needed one in view, outer
    folders first. A folder is in view unless the latest layer on it or on a folder holding
    it is a cover; a needed folder that is also hidden stays in view (the task could not
    run without it)."""
    layers: list[tuple[str, Layer]] = []

    def in_view(path: str) -> bool:
        over = [layer for folder, layer in layers if _within(path, folder)]
        return not over or over[-1] is Layer.SHOW

    for path in sorted(hidden | needed, key=lambda p: (p.count(os.sep), p)):
        if path in needed:
            if not in_view(path):
                layers.append((path, Layer.SHOW))
        elif in_view(path):
            layers.append((path, Layer.COVER))
    return tuple(layers)


def _show_read_only(opened: int, folder: str) -> None:
    """Mounts the folder open as opened back on its path, read-only: within a cover, whose
    file system the runner may write, the path is made first."""
    flags = _MS_NOSUID | _MS_NODEV
    kept = os.fstatvfs(opened).f_flag
    for reported, flag in _KEPT_FLAGS.items():
        if kept & reported:
            flags |= flag
    os.makedirs(folder, exist_ok=True)
    _mount(f"/proc/self/fd/{opened}", folder, None, _MS_BIND | _MS_REC)
    os.close(opened)
    _mount("none", folder, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise SandboxError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _LIBC.mount(
            source.encode(),
            target.encode(),
            kind.encode() if kind else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


class _CloneArgs(ctypes.Structure):
    """struct clone_args of clone3(2)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
            "set_tid",
            "set_tid_size",
            "cgroup",
        )
    ]


def _fork_into_new_pid_namespace() -> int:
    """fork(), the child the first process of a new PID namespace: 0 in the child, its process
    id in the parent. clone3(2), not unshare(2): a process may unshare its children's PID
    namespace once only, and a keeper makes one for every task. Python is told of the fork as
    os.fork() would tell it."""
    arguments = _CloneArgs(flags=_CLONE_NEWPID, exit_signal=signal.SIGCHLD)
    _PYTHON.PyOS_BeforeFork()
    child = _LIBC.syscall(_SYS_CLONE3, ctypes.byref(arguments), ctypes.sizeof(arguments))
    number = ctypes.get_errno()
    if child == 0:
        _PYTHON.PyOS_AfterFork_Child()
        return 0
    _PYTHON.PyOS_AfterFork_Parent()
    if child < 0:
        raise SandboxError(number, f"clone3(PID namespace): {os.strerror(number)}")
    return int(child)


def _user_namespace() -> str:
    return os.readlink("/proc/self/ns/user")


def _enter_user_namespace() -> None:
    """A user namespace of the keeper's own, mapping the ids it has outside to the same ids."""
    uid, gid = os.geteuid(), os.getegid()  # unmapped until _map_ids: read them now
    _check(_LIBC.unshare(_CLONE_NEWUSER), "unshare(user namespace)")
    # A process that changed its user (the workers' own, under a unit run as root) is not
    # dumpable, and then may not write its own maps; the runner is made undumpable again.
    _check(_LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(dumpable)")
    _map_ids(uid, gid)


def _map_ids(uid: int, gid: int) -> None:
    """Inside the new user namespace, the ids the process had outside (the only ones an
    unprivileged process may map). Each map is written in one write(2), as the kernel wants."""
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        descriptor = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(descriptor, text.encode())
        finally:
            os.close(descriptor)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> None:
    """Empties the bounding, effective, permitted and inheritable sets."""
    for capability in range(_LAST_CAPABILITY + 1):
        if _LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _check(-1, "prctl(drop capability)")  # EINVAL (22): no such capability
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    empty = (_CapData * 2)()
    _check(_LIBC.capset(ctypes.byref(header), empty), "capset")


def available() -> str | None:
    """None when tasks can be sandboxed here (tried in a child process); else why not."""
    if _LIBC is None:
        return f"sandboxing needs Linux, not {sys.platform}"
    probe = subprocess.run(
        [sys.executable, "-m", __name__],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if probe.returncode == 0:
        return None
    lines = (probe.stderr.strip() or f"exit status {probe.returncode}").splitlines()
    return lines[-1]


def _probe() -> None:
    """Sandboxes a no-op task, as a keeper would; exits 0 when the runner got that far."""
    status = Sandbox.for_unit(os.environ.get("HOME", ""), 1024 * 1024, 16).run_task()
    if status is None:
        with open("/proc/1/comm") as comm:  # the runner is the first of its namespace
            os._exit(0 if os.getpid() == 1 and comm.read() else 3)
    sys.exit(status)


if __name__ == "__main__":
    _probe()
