"""Computing units as local process trees, one per unit.

Each unit is ``python -m cu_service`` from the registry's own interpreter, on a
free port of the registry's host (reached at the advertised host, if set), in its
own process group, with a parent-death signal (it cannot outlive the registry).
Its environment is built from scratch: the unit's non-secret settings and what
Python and Java need, nothing of the registry's.

When the registry runs as root, each unit runs as its own unprivileged system
user (``tlu-<hash of the unit id>``, made at each launch and removed when the unit stops,
with its home: system users are few, some nine hundred) whose home, temporary
and Spark folders are of mode 0700: units cannot read each other's files nor,
being different users, each other's or the mesh's ``/proc/<pid>/environ``. The
unit's secrets are files of mode 0600 owned by that user, named by the settings'
``_FILE`` variants. Run as another user, units run as that same user: their
processes are apart, but the operating system does not keep them apart, and such a unit
tells the registry its workers are not confined (``TEXERA_LAKE_CU_SHARES_OS_USER``), so it
runs its owner's executions only (see docs/isolation.md)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from service_runtime.config import ENV_PREFIX
from service_runtime.ports import free_port
from service_runtime.processes import ManagedProcess, ensure_system_user, remove_system_user
from unit_launcher.base import Launcher, UnitPhase, UnitSpec, UnitStatus

#: What a unit inherits from the registry's environment: what Python and Java need to run.
_INHERITED = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ")
#: Where the unit's packages are found: beside this one (the unit runs `python -m cu_service`).
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def unit_user(unit_id: str) -> str:
    """The system user a unit runs as (at most 32 characters, as useradd wants)."""
    return "tlu-" + hashlib.sha256(unit_id.encode()).hexdigest()[:16]


@dataclass
class _Running:
    process: ManagedProcess
    address: str
    home: Path


class ProcessLauncher(Launcher):
    """Units as children of this process, their folders under root."""

    def __init__(self, root: Path, *, host: str = "127.0.0.1", advertised_host: str = "") -> None:
        self._root = root
        self._host = host
        self._advertised_host = advertised_host or host
        self._isolated = os.geteuid() == 0
        self._units: dict[str, _Running] = {}
        self._exited: dict[str, UnitStatus] = {}
        root.mkdir(parents=True, exist_ok=True)
        # Units traverse root to reach their own home, and may list nothing in it.
        root.chmod(0o711 if self._isolated else 0o700)
        self.log_dir.mkdir(mode=0o700, exist_ok=True)

    @property
    def log_dir(self) -> Path:
        """Where each unit's output goes (``<unit id>.log``) and its process id
        (``<unit id>.pid``); readable by the registry's user only."""
        return self._root / "logs"

    async def launch(self, spec: UnitSpec) -> UnitStatus:
        await self.stop(spec.unit_id)
        user = await asyncio.to_thread(self._user_of, spec.unit_id)
        home = await asyncio.to_thread(self._prepare_home, spec, user)
        port = free_port(self._host)
        environment = self._environment(spec, home, port)
        # Started from the event loop's thread: the parent-death signal fires when the thread
        # that started the child ends, and this one lasts as long as the registry.
        process = ManagedProcess(
            spec.unit_id,
            [sys.executable, "-m", "cu_service"],
            self.log_dir / f"{spec.unit_id}.log",
            env=environment,
            user=user,
            stop_signal=signal.SIGTERM,
        )
        (self.log_dir / f"{spec.unit_id}.pid").write_text(f"{process.pid}\n")
        running = _Running(process, f"{self._advertised_host}:{port}", home)
        self._units[spec.unit_id] = running
        self._exited.pop(spec.unit_id, None)
        return UnitStatus(UnitPhase.PENDING, running.address)

    def _user_of(self, unit_id: str) -> str | None:
        if not self._isolated:
            return None
        name = unit_user(unit_id)
        ensure_system_user(name)
        return name

    def _prepare_home(self, spec: UnitSpec, user: str | None) -> Path:
        """A fresh home (with tmp/, spark/ and secrets/) only the unit's user may enter."""
        home = self._root / spec.unit_id
        shutil.rmtree(home, ignore_errors=True)
        folders = [home, home / "tmp", home / "spark", home / "secrets"]
        for folder in folders:
            folder.mkdir(mode=0o700)
        files = []
        for name, value in spec.secrets.items():
            path = home / "secrets" / name.lower()
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(value)
            files.append(path)
        if user is not None:
            owner = shutil.chown
            for path in [*folders, *files]:
                owner(path, user, user)
        return home

    def _environment(self, spec: UnitSpec, home: Path, port: int) -> dict[str, str]:
        inherited = {name: os.environ[name] for name in _INHERITED if name in os.environ}
        return {
            **inherited,
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "SPARK_LOCAL_DIRS": str(home / "spark"),
            "PYTHONPATH": _PROJECT_ROOT,
            "PYTHONUNBUFFERED": "1",
            **{
                name: value
                for name, value in spec.settings.items()
                if name.startswith(ENV_PREFIX) and not name.endswith("_FILE")
            },
            f"{ENV_PREFIX}HOST": self._host,
            f"{ENV_PREFIX}CU_ID": spec.unit_id,
            f"{ENV_PREFIX}CU_PORT": str(port),
            f"{ENV_PREFIX}CU_ADVERTISED_ADDRESS": f"{self._advertised_host}:{port}",
            f"{ENV_PREFIX}CU_METRICS_PORT": "0",
            f"{ENV_PREFIX}CU_SHARES_OS_USER": "false" if self._isolated else "true",
            # The unit's own cores, unless units run on a Spark cluster.
            f"{ENV_PREFIX}CU_SPARK_MASTER": spec.settings.get(
                f"{ENV_PREFIX}CU_SPARK_MASTER", f"local[{spec.cores}]"
            ),
            f"{ENV_PREFIX}CU_SPARK_DRIVER_MEMORY": f"{spec.memory_mib}m",
            **{f"{name}_FILE": str(home / "secrets" / name.lower()) for name in spec.secrets},
        }

    async def status(self, unit_id: str) -> UnitStatus:
        running = self._units.get(unit_id)
        if running is None:
            return self._exited.get(unit_id, UnitStatus(UnitPhase.STOPPED))
        if running.process.running():
            return UnitStatus(UnitPhase.RUNNING, running.address)
        code = running.process.returncode
        failed = UnitStatus(
            UnitPhase.FAILED, message=f"the unit's process exited with status {code}"
        )
        self._forget(unit_id)
        self._exited[unit_id] = failed
        return failed

    async def stop(self, unit_id: str) -> None:
        self._exited.pop(unit_id, None)
        running = self._units.get(unit_id)
        if running is None:
            return
        await asyncio.to_thread(running.process.stop)
        self._forget(unit_id)
        await asyncio.to_thread(shutil.rmtree, running.home, True)
        if self._isolated:  # its home is gone: the next launch makes the user anew
            await asyncio.to_thread(remove_system_user, unit_user(unit_id))

    def _forget(self, unit_id: str) -> None:
        self._units.pop(unit_id, None)
        (self.log_dir / f"{unit_id}.pid").unlink(missing_ok=True)

    async def close(self) -> None:
        """Stops every unit: they are this process's children, which end with it anyway
        (the parent-death signal); stopped here, they end cleanly."""
        await asyncio.gather(*(self.stop(unit_id) for unit_id in list(self._units)))
