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
runs its owner's executions only (see docs/isolation.md).

Run as root, each unit is also bounded as a whole (unit_launcher.unit_groups): its groups are
made before it starts, limited to the memory its size gives it (unit_launcher.unit_memory, as a
Pod's), and its process is put in them at once; stopping the unit ends every process in them,
wherever it went. A unit whose groups cannot be made is told so
(``TEXERA_LAKE_CU_PROCESSES_BOUNDED``) and, like one sharing an OS user, runs its owner's
executions only."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from service_runtime.config import ENV_PREFIX
from service_runtime.ports import free_port
from service_runtime.processes import (
    ManagedProcess,
    ProcessFailed,
    ensure_system_user,
    remove_system_user,
)
from unit_launcher.base import Launcher, UnitPhase, UnitSpec, UnitStatus
from unit_launcher.cpu_groups import CpuGroups
from unit_launcher.hand_over import (
    HAND_OVER_SETTING,
    HandOverFailed,
    deliver,
    file_variables,
    is_ready,
    make_pipe,
    secret_file,
    write_secret_files,
)
from unit_launcher.unit_groups import UnitGroups
from unit_launcher.unit_memory import unit_memory_bytes

#: What a unit inherits from the registry's environment: what Python and Java need to run.
_INHERITED = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ")
#: Where the unit's packages are found: beside this one (the unit runs `python -m cu_service`).
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


log = logging.getLogger("unit_launcher.process")


def unit_user(unit_id: str) -> str:
    """The system user a unit runs as (at most 32 characters, as useradd wants)."""
    return "tlu-" + hashlib.sha256(unit_id.encode()).hexdigest()[:16]


@dataclass
class _Running:
    process: ManagedProcess
    address: str
    home: Path
    user: str | None
    #: The id the unit was started under, which names its cgroups.
    group: str
    #: The bounding groups the unit is in (unit_launcher.unit_groups), if it is in them.
    bounds: UnitGroups | None
    #: A pooled unit's pipe, until it is handed over (see unit_launcher.hand_over).
    pipe: Path | None = None
    #: Whether the unit is in a cpu group of its own (unit_launcher.cpu_groups).
    weighted: bool = False


def _enter(bounds: UnitGroups, unit_id: str, process: ManagedProcess) -> None:
    """Puts the unit's process in its bounding groups: a unit told it is bounded runs in them
    or not at all (ProcessFailed)."""
    try:
        bounds.add(unit_id, process.pid)
    except OSError as exc:
        process.kill()
        bounds.end(unit_id)
        raise ProcessFailed(f"cannot put unit {unit_id} in its cgroups: {exc}") from exc


class ProcessLauncher(Launcher):
    """Units as children of this process, their folders under root, each weighted by
    cpu_groups and bounded by unit_groups if given."""

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        advertised_host: str = "",
        hand_over_seconds: float = 60.0,
        cpu_groups: CpuGroups | None = None,
        unit_groups: UnitGroups | None = None,
    ) -> None:
        self._root = root
        self._cpu_groups = cpu_groups
        self._unit_groups = unit_groups
        self._host = host
        self._advertised_host = advertised_host or host
        self._hand_over_seconds = hand_over_seconds
        self._isolated = os.geteuid() == 0
        self._units: dict[str, _Running] = {}
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
        user, home = await self._prepare(spec.unit_id)
        await asyncio.to_thread(self._write_secrets, home, spec.secrets, user)
        port = free_port(self._host)
        running = self._start(spec, user, home, self._identity(spec, home, port))
        running.address = self._address(port)
        return UnitStatus(UnitPhase.PENDING, running.address)

    async def launch_pooled(self, spec: UnitSpec) -> None:
        await self.stop(spec.unit_id)
        user, home = await self._prepare(spec.unit_id)
        pipe = home / "secrets" / "hand-over"
        await asyncio.to_thread(self._make_pipe, pipe, user)
        identity = {f"{ENV_PREFIX}CU_ID": spec.unit_id, HAND_OVER_SETTING: str(pipe)}
        self._start(spec, user, home, identity).pipe = pipe

    async def pooled_ready(self, pool_id: str) -> bool:
        running = self._units.get(pool_id)
        return (
            running is not None
            and running.pipe is not None
            and running.process.running()
            and is_ready(running.pipe)
        )

    async def hand_over(self, pool_id: str, spec: UnitSpec) -> UnitStatus:
        running = self._units.get(pool_id)
        if running is None or running.pipe is None:
            raise HandOverFailed(f"no pooled unit {pool_id}")
        await self.stop(spec.unit_id)
        port = free_port(self._host)
        try:
            await asyncio.to_thread(self._write_secrets, running.home, spec.secrets, running.user)
            await asyncio.to_thread(
                deliver,
                running.pipe,
                self._identity(spec, running.home, port),
                self._hand_over_seconds,
            )
        except (HandOverFailed, OSError) as exc:
            await self.stop(pool_id)
            raise HandOverFailed(str(exc)) from exc
        self._rename(pool_id, spec.unit_id)
        running.pipe, running.address = None, self._address(port)
        return UnitStatus(UnitPhase.PENDING, running.address)

    async def _prepare(self, unit_id: str) -> tuple[str | None, Path]:
        user = await asyncio.to_thread(self._user_of, unit_id)
        return user, await asyncio.to_thread(self._prepare_home, unit_id, user)

    def _start(
        self, spec: UnitSpec, user: str | None, home: Path, identity: dict[str, str]
    ) -> _Running:
        """Starts the unit's process. Started from the event loop's thread: the parent-death
        signal fires when the thread that started the child ends, and this one lasts as long
        as the registry. Its interpreter is still loading when it is put in its groups: it has
        started nothing yet."""
        bounds = self._bound(spec)
        process = ManagedProcess(
            spec.unit_id,
            [sys.executable, "-m", "cu_service"],
            self.log_dir / f"{spec.unit_id}.log",
            env={**self._environment(spec, home, bounded=bounds is not None), **identity},
            user=user,
            stop_signal=signal.SIGTERM,
        )
        if bounds is not None:
            _enter(bounds, spec.unit_id, process)
        (self.log_dir / f"{spec.unit_id}.pid").write_text(f"{process.pid}\n")
        running = _Running(process, "", home, user, spec.unit_id, bounds)
        self._units[spec.unit_id] = running
        if self._cpu_groups is not None:
            try:
                self._cpu_groups.place(spec.unit_id, spec.cores, process.pid)
                running.weighted = True
            except OSError as exc:
                log.warning(
                    "a unit runs outside a cgroup of its own",
                    extra={"unit_id": spec.unit_id, "why": exc.strerror},
                )
        return running

    def _bound(self, spec: UnitSpec) -> UnitGroups | None:
        """Makes the unit's bounding groups: the groups it is to be in, or None (said in the
        log) if it runs without."""
        if self._unit_groups is None:
            return None  # said once, when the registry started
        try:
            self._unit_groups.make(spec.unit_id, unit_memory_bytes(spec.cores, spec.memory_mib))
        except OSError as exc:
            log.warning(
                "a unit runs without cgroups bounding its memory and processes, so it runs its "
                "owner's executions only",
                extra={"unit_id": spec.unit_id, "why": exc.strerror},
            )
            return None
        return self._unit_groups

    def _user_of(self, unit_id: str) -> str | None:
        if not self._isolated:
            return None
        name = unit_user(unit_id)
        ensure_system_user(name)
        return name

    def _prepare_home(self, unit_id: str, user: str | None) -> Path:
        """A fresh home (with tmp/, spark/ and secrets/) only the unit's user may enter."""
        home = self._root / unit_id
        shutil.rmtree(home, ignore_errors=True)
        folders = [home, home / "tmp", home / "spark", home / "secrets"]
        for folder in folders:
            folder.mkdir(mode=0o700)
            self._give(folder, user)
        return home

    def _write_secrets(self, home: Path, secrets: Mapping[str, str], user: str | None) -> None:
        """Each secret in a file of mode 0600 of the unit's user, in its secrets/ folder."""
        for path in write_secret_files(home / "secrets", secrets).values():
            self._give(path, user)

    def _make_pipe(self, pipe: Path, user: str | None) -> None:
        make_pipe(pipe)
        self._give(pipe, user)

    @staticmethod
    def _give(path: Path, user: str | None) -> None:
        if user is not None:
            shutil.chown(path, user, user)

    def _address(self, port: int) -> str:
        return f"{self._advertised_host}:{port}"

    def _environment(self, spec: UnitSpec, home: Path, *, bounded: bool) -> dict[str, str]:
        """What every unit's process starts with; its identity comes on top (at launch, or
        at hand-over for a pooled unit)."""
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
            f"{ENV_PREFIX}CU_METRICS_PORT": "0",
            f"{ENV_PREFIX}CU_SHARES_OS_USER": "false" if self._isolated else "true",
            # The unit's own cores, unless units run on a Spark cluster.
            f"{ENV_PREFIX}CU_SPARK_MASTER": spec.settings.get(
                f"{ENV_PREFIX}CU_SPARK_MASTER", f"local[{spec.cores}]"
            ),
            f"{ENV_PREFIX}CU_SPARK_DRIVER_MEMORY": f"{spec.memory_mib}m",
            f"{ENV_PREFIX}CU_MEMORY_BUDGET_BYTES": str(
                unit_memory_bytes(spec.cores, spec.memory_mib)
            ),
            f"{ENV_PREFIX}CU_PROCESSES_BOUNDED": "true" if bounded else "false",
        }

    def _identity(self, spec: UnitSpec, home: Path, port: int) -> dict[str, str]:
        """What makes the process spec's unit: its id, port, address and secrets' files."""
        return {
            f"{ENV_PREFIX}CU_ID": spec.unit_id,
            f"{ENV_PREFIX}CU_PORT": str(port),
            f"{ENV_PREFIX}CU_ADVERTISED_ADDRESS": self._address(port),
            **file_variables({name: secret_file(home / "secrets", name) for name in spec.secrets}),
        }

    def _rename(self, pool_id: str, unit_id: str) -> None:
        """The pooled unit's records, from now on under the unit's id."""
        self._units[unit_id] = self._units.pop(pool_id)
        for suffix in (".log", ".pid"):
            (self.log_dir / f"{pool_id}{suffix}").replace(self.log_dir / f"{unit_id}{suffix}")

    async def status(self, unit_id: str) -> UnitStatus:
        running = self._units.get(unit_id)
        if running is None:
            return UnitStatus(UnitPhase.STOPPED)
        if running.process.running():
            return UnitStatus(UnitPhase.RUNNING, running.address)
        code = running.process.returncode
        return UnitStatus(UnitPhase.FAILED, message=f"the unit's process exited with status {code}")

    async def stop(self, unit_id: str) -> None:
        running = self._units.pop(unit_id, None)
        if running is None:
            return
        await asyncio.to_thread(running.process.stop)
        if running.bounds is not None:
            # What left the unit's process group (a daemon, users' code) ends here.
            await asyncio.to_thread(running.bounds.end, running.group)
        (self.log_dir / f"{unit_id}.pid").unlink(missing_ok=True)
        await asyncio.to_thread(shutil.rmtree, running.home, True)
        if running.weighted and self._cpu_groups is not None:
            await asyncio.to_thread(self._cpu_groups.remove, running.group)
        if running.user is not None:  # its home is gone: the next launch makes the user anew
            await asyncio.to_thread(remove_system_user, running.user)

    async def close(self) -> None:
        """Stops every unit (and every pooled one): they are this process's children, which
        end with it anyway (the parent-death signal); stopped here, they end cleanly."""
        await asyncio.gather(*(self.stop(unit_id) for unit_id in list(self._units)))
