"""Spark's Python daemon for this unit, confined (``spark.python.daemon.module``).

The JVM starts it once; it forks every Python worker (users' functions and the
writer's tasks), and the workers inherit what it sets before handing over to
pyspark's own daemon: resource limits (address space, open files) and, when the
unit runs as root, an unprivileged OS user with a limit on its processes. A
user's function then cannot read what only root can, signal or trace the unit,
or take the machine's memory: an allocation over the limit fails in the worker.

Once confined, it imports what the unit's tasks run (PRELOADED) and freezes the garbage
collector's view of everything loaded so far, before the first fork. A reused Python worker
runs a full collection after every task (pyspark's daemon does), and with pyarrow, pyiceberg
and pydantic loaded that walks some 180,000 objects, about 0.1 s of CPU a task; frozen, it
walks only what the task left. Workers also start with their imports done.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
from dataclasses import asdict, dataclass

#: The environment variable that carries the confinement from the unit to the daemon.
VARIABLE = "TEXERA_LAKE_WORKER_CONFINEMENT"
#: What the unit's tasks import: the writer's, users' functions' and table sources' code, and
#: pyspark's Arrow serializers.
PRELOADED = (
    "pyspark.sql.pandas.serializers",
    "cu_service.writer.output",
    "cu_service.workflow.udf",
    "cu_service.workflow.iceberg_source",
)


@dataclass(frozen=True)
class Confinement:
    memory_bytes: int
    open_files: int
    processes: int
    #: The user (uid, gid, home) to run as; None keeps the unit's (it does not run as root).
    user: tuple[int, int, str] | None

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Confinement:
        fields = json.loads(text)
        user = fields.pop("user")
        return cls(**fields, user=tuple(user) if user else None)

    def apply(self) -> None:
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


def preload() -> None:
    """Imports PRELOADED and takes every object there is out of the collector's view."""
    for module in PRELOADED:
        importlib.import_module(module)
    gc.freeze()


def main() -> None:
    Confinement.decode(os.environ.pop(VARIABLE)).apply()
    from pyspark.daemon import manager  # noqa: PLC0415 - only once confined

    preload()
    manager()


if __name__ == "__main__":
    main()
