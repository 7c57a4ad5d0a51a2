"""Spark's Python daemon for this unit, confined (``spark.python.daemon.module``).

The JVM starts it once; it forks the Python workers that run tasks (users' functions and the
writer's tasks). The workers inherit what it sets before handing over to pyspark's own
daemon: resource limits (address space, open files) and, when the unit runs as root, an
unprivileged OS user of their own. Where the unit sandboxes tasks (cu_service.sandbox), a
worker runs each task in a process and namespaces of the task's own: it sees no other
process, none of the unit's files, nothing an earlier task left, and its processes count
against the process limit apart. A user's function then cannot
read the unit's or another task's memory or files, signal or trace them, or take the
machine's memory: an allocation over the limit fails in the worker.

Once confined, it imports what the unit's tasks run (PRELOADED) and freezes the garbage
collector's view of everything loaded so far, before the first fork, so that workers start
with their imports done and their collections walk only what their task made.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import resource
import sys
from dataclasses import asdict, dataclass
from importlib.machinery import PathFinder
from pathlib import Path

from cu_service.sandbox import Sandbox

#: The environment variable that carries the confinement from the unit to the daemon.
VARIABLE = "TEXERA_LAKE_WORKER_CONFINEMENT"
#: Secrets an executor's environment hands its Python daemon: a standalone cluster's
#: (Spark's SecurityManager.ENV_AUTH_SECRET), and the key to a daemon on a loopback port.
INHERITED_SECRETS = ("_SPARK_AUTH_SECRET", "PYTHON_WORKER_FACTORY_SECRET")
#: Set by Spark when its daemon listens on a UNIX socket.
_UNIX_SOCKET = "PYTHON_UNIX_DOMAIN_ENABLED"
#: The kernel's highest score for ending a process when memory runs out (oom_score_adj).
OOM_FIRST = 1000
#: Archives Spark puts on the Python path.
_ARCHIVES = (".zip", ".jar")
#: What the unit's tasks import: the writer's, users' functions' and table sources' code, and
#: pyspark's Arrow serializers.
PRELOADED = (
    "pyspark.sql.pandas.serializers",
    "pyspark.worker",
    "cu_service.writer.output",
    "cu_service.workflow.udf",
    "cu_service.workflow.iceberg_source",
)
#: What users' functions often import, when the unit's environment has it: each task runs in a
#: process of its own, which would otherwise import it again.
PRELOADED_IF_INSTALLED = ("pandas",)


@dataclass(frozen=True)
class Confinement:
    memory_bytes: int
    open_files: int
    processes: int
    #: The user (uid, gid, home) to run as; None keeps the unit's (it does not run as root).
    user: tuple[int, int, str] | None
    #: Whether each task runs in a sandbox of its own (cu_service.sandbox).
    sandboxed: bool = False
    #: Room for a sandboxed task's scratch file systems, all together (memory, counted in
    #: the unit's bound).
    scratch_bytes: int = 0

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Confinement:
        fields = json.loads(text)
        user = fields.pop("user")
        return cls(**fields, user=tuple(user) if user else None)

    def apply(self) -> None:
        # Where the unit's memory runs out, the kernel ends a worker (and its task with its
        # scratch files) before the unit's JVM or driver, which hold every execution.
        with open("/proc/self/oom_score_adj", "w") as score:
            score.write(str(OOM_FIRST))
        _lower(resource.RLIMIT_AS, self.memory_bytes)
        _lower(resource.RLIMIT_NOFILE, self.open_files)
        if self.user is None:
            return
        # Counted per user: only meaningful for a user of the workers' own.
        _lower(resource.RLIMIT_NPROC, self.processes)
        uid, gid, home = self.user
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        os.environ["HOME"] = home


def _lower(kind: int, value: int) -> None:
    """Sets both the soft and hard limit to value, or to the hard limit if that is lower."""
    _, hard = resource.getrlimit(kind)
    limit = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (limit, limit))


def import_from_directories() -> None:
    """Takes Spark's archives (pyspark's zip, py4j's, Spark's core jar) off the module path
    when the packages they hold are installed as directories too (a unit's virtual
    environment). pyspark calls importlib.invalidate_caches() at the start of every task,
    which makes every zip importer read its archive's directory again: some 0.1 s of CPU a
    task, now that every task has a worker of its own."""
    directories = [entry for entry in sys.path if not entry.endswith(_ARCHIVES)]
    if all(PathFinder.find_spec(name, directories) for name in ("pyspark", "py4j")):
        sys.path[:] = directories
        forget_archive_importers()


def forget_archive_importers() -> None:
    """Drops the cached importers of paths in Spark's archives (the archives' own, probed
    already, and those of paths inside them that imports cache later, such as a package's
    folder in Spark's core jar), which every task's invalidate_caches() would make read their
    archive's directory again."""
    for entry in [e for e in sys.path_importer_cache if _in_archive(e)]:
        del sys.path_importer_cache[entry]


def _in_archive(path: str) -> bool:
    return any(part.endswith(_ARCHIVES) for part in Path(path).parts)


def preload() -> None:
    """Imports PRELOADED (and PRELOADED_IF_INSTALLED, where installed) and takes every object
    there is out of the collector's view."""
    for module in PRELOADED:
        importlib.import_module(module)
    for module in PRELOADED_IF_INSTALLED:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    gc.freeze()


def without_inherited_secrets() -> None:
    """Starts this daemon again, the same process, without the secrets its environment
    inherited: a worker forked from it, so every task, would find them in its own memory
    (an environment block outlives os.environ's entry). Refuses a daemon on a loopback port,
    whose secret every task would need to hold; Spark serves it on a UNIX socket
    (cu_service.spark_security)."""
    if os.environ.get(_UNIX_SOCKET, "").lower() != "true":
        raise SystemExit(
            "pyspark's daemon must listen on a UNIX socket (spark.python.unix.domain.socket"
            ".enabled): on a loopback port every task would hold the secret that reaches it"
        )
    if any(name in os.environ for name in INHERITED_SECRETS):
        clean = {k: v for k, v in os.environ.items() if k not in INHERITED_SECRETS}
        os.execve(sys.executable, sys.orig_argv, clean)  # noqa: S606 - this very command


def main() -> None:
    without_inherited_secrets()
    confinement = Confinement.decode(os.environ.pop(VARIABLE))
    unit_home = os.environ.get("HOME", "")  # the unit's, before apply() gives the workers'
    confinement.apply()
    import_from_directories()
    from pyspark import daemon  # noqa: PLC0415 - only once confined

    from cu_service import pyspark_daemon  # noqa: PLC0415 - imports pyspark

    if confinement.sandboxed:
        sandbox = Sandbox.for_unit(unit_home, confinement.scratch_bytes, confinement.processes)
        pyspark_daemon.run_workers_in(sandbox)
    preload()
    forget_archive_importers()
    daemon.manager()


if __name__ == "__main__":
    main()
