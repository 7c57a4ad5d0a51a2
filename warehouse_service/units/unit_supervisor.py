"""The registry's side of computing units' lives: launching, watching, idling, deleting.

A unit is PROVISIONING from its launch until it registers (then RUNNING), FAILED
when it could not start or its process ended unexpectedly, STOPPED after it was
idle for a while, DELETING while it is being deleted. Launching, stopping and
deleting one unit are serialized by a per-unit lock; the database row is the
truth every transition checks. Each launch issues the unit a new credential.

The process launcher keeps units as children of this registry: run it as one
replica (a Kubernetes launcher's Pods outlive any replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Mapping

import grpc

from service_runtime.config import ENV_PREFIX
from service_runtime.errors import Resource, ServiceError, failed_precondition, not_found
from unit_launcher.base import Launcher, UnitPhase, UnitSpec, UnitStatus
from unit_launcher.hand_over import HandOverFailed
from unit_launcher.unit_settings import ComputingUnitSettings
from warehouse_service.store import executions, unit_records, unit_registrations, unit_supervision
from warehouse_service.store.db import Database, Record
from warehouse_service.store.unit_launches import UnitLaunches, new_generation
from warehouse_service.units.unit_certificates import UnitCertificates
from warehouse_service.units.unit_credentials import UnitCredentials
from warehouse_service.units.unit_pool import UnitPool

log = logging.getLogger("warehouse_service.units")

CREDENTIAL_SETTING = f"{ENV_PREFIX}CU_CREDENTIAL"
#: Lets units whose workers are not confined run others' executions too.
SHARE_UNCONFINED_SETTING = f"{ENV_PREFIX}WAREHOUSE_SHARE_UNCONFINED_UNITS"
#: Where a unit's row must be for it to take a new execution.
USABLE_STATES = ("PROVISIONING", "RUNNING")


def unit_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The non-secret settings of a computing unit that this registry's environment sets:
    what every unit it launches is configured with."""
    names = {
        ComputingUnitSettings.variable_name(f)
        for f in dataclasses.fields(ComputingUnitSettings)
        if not f.metadata["secret"]
    }
    return {name: value for name, value in environ.items() if name in names}


def not_confined(unit_id: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"computing unit {unit_id} does not confine the Python workers that run users' code, "
        f"so it runs only its owner's executions (unless the registry's "
        f"{SHARE_UNCONFINED_SETTING} is true)",
        reason="COMPUTING_UNIT_NOT_CONFINED",
        metadata={"computing_unit_id": unit_id},
    )


def new_unit_id() -> str:
    return f"cu-{secrets.token_hex(8)}"


class UnitSupervisor:
    def __init__(
        self,
        db: Database,
        launcher: Launcher,
        *,
        credentials: UnitCredentials,
        launches: UnitLaunches,
        settings: Mapping[str, str],
        shared_secrets: Mapping[str, str] | None = None,
        idle_seconds: float,
        start_timeout_seconds: float,
        default_cores: int,
        default_memory_mib: int,
        share_unconfined: bool = False,
        certificates: UnitCertificates | None = None,
        pool: UnitPool | None = None,
    ) -> None:
        self._db = db
        self._launcher = launcher
        self._credentials = credentials
        self._launches = launches
        #: Every unit's settings (pooled ones' too).
        self._settings = dict(settings)
        #: Secrets every unit gets besides its own credential (global-sql: the SQL catalog's).
        self._shared_secrets = dict(shared_secrets or {})
        self._idle = idle_seconds
        self._start_timeout = start_timeout_seconds
        self._default_size = (default_cores, default_memory_mib)
        self._share_unconfined = share_unconfined
        self._certificates = certificates
        #: The warm pool, if one is kept.
        self.pool = pool
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._launching: set[asyncio.Task[None]] = set()
        #: Units whose launch is under way (before it holds the unit's lock).
        self._pending: set[str] = set()

    # Launching ----------------------------------------------------------------------

    def launch_soon(self, unit_id: str) -> None:
        """Launches a PROVISIONING unit in the background (the caller need not wait)."""
        self._pending.add(unit_id)
        task = asyncio.create_task(self._launch_new(unit_id))
        self._launching.add(task)
        task.add_done_callback(self._launching.discard)

    async def _launch_new(self, unit_id: str) -> None:
        try:
            async with self._locks[unit_id]:
                await self._launch(unit_id)
        finally:
            self._pending.discard(unit_id)

    async def _launch(self, unit_id: str) -> None:
        """Launches a PROVISIONING unit; the caller holds the unit's lock."""
        generation = new_generation()  # every credential of an earlier launch ends here
        async with self._db.connection() as connection:
            row = await unit_supervision.begin_launch(connection, unit_id, generation)
        self._launches.forget(unit_id)
        if row is None:
            return
        spec = UnitSpec(
            unit_id=unit_id,
            owner_user_id=row["owner_user_id"],
            cores=row["cores"],
            memory_mib=row["memory_mib"],
            settings=self._settings,
            secrets={
                **self._shared_secrets,
                **(self._certificates.at_launch(unit_id) if self._certificates else {}),
                CREDENTIAL_SETTING: self._credentials.issue(
                    unit_id, row["owner_user_id"], generation
                ),
            },
        )
        try:
            status = await self._start_process(spec)
            async with self._db.connection() as connection:
                await unit_supervision.record_launch_address(
                    connection, unit_id, generation, status.address or None
                )
        except Exception as exc:
            log.exception("launching a computing unit failed", extra={"unit_id": unit_id})
            await self._set_state(
                unit_id, "FAILED", f"the unit could not be launched ({type(exc).__name__})"
            )
            return
        log.info("computing unit launched", extra={"unit_id": unit_id})

    async def _start_process(self, spec: UnitSpec) -> UnitStatus:
        """A pooled unit of spec's size handed over, if the pool has one; else a new one."""
        pool_id = self.pool.take(spec.cores, spec.memory_mib) if self.pool else None
        if pool_id is not None:
            try:
                status = await self._launcher.hand_over(pool_id, spec)
            except HandOverFailed as exc:
                log.warning(
                    "a pooled unit could not be handed over; launching a new one",
                    extra={"unit_id": spec.unit_id, "why": str(exc)},
                )
            else:
                log.info("pooled unit handed over", extra={"unit_id": spec.unit_id})
                return status
        return await self._launcher.launch(spec)

    async def start(self, unit_id: str) -> None:
        """Launches a STOPPED or FAILED unit again."""
        async with self._locks[unit_id]:
            async with self._db.connection() as connection:
                started = await unit_supervision.restart(connection, unit_id)
            if started:
                await self._launch(unit_id)

    async def _set_state(
        self,
        unit_id: str,
        state: str,
        message: str,
        *,
        when: unit_supervision.Condition = unit_supervision.ANY_STATE,
    ) -> bool:
        """Moves a unit to state if its row meets when; ends its registration unless the new
        state is RUNNING."""
        async with self._db.transaction() as connection:
            # Stopped or failed, the unit's process is gone (or going): so is its credential.
            changed = await unit_supervision.set_state(connection, unit_id, state, message, when)
            if changed and state != "RUNNING":
                await unit_registrations.unregister(
                    connection, unit_id, f"computing unit {unit_id} {message}"
                )
        self._launches.forget(unit_id)
        return changed

    # Submissions --------------------------------------------------------------------

    def check_confined(self, unit: Record, user_id: str, workers_confined: bool | None) -> None:
        """Refuses user_id on the unit if its latest registration said its workers are not
        confined (None: it never registered), unless user_id owns it or this registry lets
        such units be shared."""
        guest = unit["owner_user_id"] != user_id
        if workers_confined is False and guest and not self._share_unconfined:
            raise not_confined(unit["unit_id"])

    async def default_unit(self, user_id: str) -> str:
        """The user's default unit, created (and launched) on first use."""
        async with self._db.connection() as connection:
            found = await unit_supervision.default_unit(connection, user_id)
            if found is not None:
                return found
            cores, memory = self._default_size
            created = await unit_supervision.create_default(
                connection, new_unit_id(), user_id, cores, memory
            )
        if created is None:  # a concurrent first submission made it
            return await self.default_unit(user_id)
        log.info("default computing unit created", extra={"unit_id": created})
        self.launch_soon(created)
        return created

    async def acquire(self, user_id: str, unit_id: str, wait_seconds: float | None) -> Record:
        """The registration of a running unit user_id may use, started if it was stopped,
        waited for at most wait_seconds (None: the start timeout)."""
        unit_id = unit_id or await self.default_unit(user_id)
        deadline = time.monotonic() + (wait_seconds or self._start_timeout)
        restarted = False
        while True:
            async with self._db.connection() as connection:
                row = await unit_records.usable_unit(connection, unit_id, user_id)
                if row is None:
                    raise not_found(Resource.COMPUTING_UNIT, unit_id)
                registration = await unit_registrations.healthy(connection, unit_id)
                if row["state"] == "RUNNING" and registration is not None:
                    # Judged by the registration handed out: a stopped or new unit is started
                    # first (below) and judged by the one it then makes. BindExecution checks
                    # again, for a unit that has registered anew since.
                    self.check_confined(row, user_id, registration["workers_confined"])
                    await executions.touch_unit(connection, unit_id)
                    return registration
            if row["state"] == "DELETING":
                raise failed_precondition(
                    f"computing unit {unit_id} is being deleted", reason="COMPUTING_UNIT_DELETING"
                )
            if row["state"] == "FAILED" and restarted:
                raise failed_precondition(
                    f"computing unit {unit_id} failed to start: {row['state_message']}",
                    reason="COMPUTING_UNIT_FAILED",
                )
            if row["state"] in ("STOPPED", "FAILED"):
                restarted = True
                await self.start(unit_id)
                continue
            if time.monotonic() >= deadline:
                raise ServiceError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"computing unit {unit_id} is still starting; retry shortly",
                    reason="COMPUTING_UNIT_STARTING",
                    metadata={"computing_unit_id": unit_id},
                    retry_delay_seconds=2.0,
                )
            await asyncio.sleep(0.2)

    # Deleting -----------------------------------------------------------------------

    async def delete(self, unit_id: str, *, force: bool) -> list[str]:
        """Stops and deletes a unit; returns the executions it cancelled. Without force, a unit
        with unfinished executions is refused."""
        async with self._locks[unit_id]:
            async with self._db.transaction() as connection:
                await unit_supervision.lock(connection, unit_id)
                unfinished = await unit_supervision.unfinished_executions(connection, unit_id)
                if unfinished and not force:
                    raise failed_precondition(
                        f"computing unit {unit_id} still runs {len(unfinished)} execution(s); "
                        "delete it with force to cancel them",
                        reason="COMPUTING_UNIT_BUSY",
                    )
                await unit_supervision.mark_deleting(connection, unit_id)
            # Stopped with SIGTERM (or its Pod deleted), the unit cancels what it runs and
            # reports each execution CANCELLED, its partial files cleaned up.
            await self._launcher.stop(unit_id)
            async with self._db.transaction() as connection:
                await unit_supervision.cancel_unfinished(connection, unit_id)
                await unit_registrations.unregister(connection, unit_id, "")
                await unit_supervision.mark_deleted(connection, unit_id)
        self._launches.forget(unit_id)
        self._locks.pop(unit_id, None)
        log.info("computing unit deleted", extra={"unit_id": unit_id, "cancelled": unfinished})
        return unfinished

    # Watching -----------------------------------------------------------------------

    async def check(self) -> None:
        """Fails units whose process ended, or that are neither known to the launcher nor
        registered, or that never registered in time; stops idle ones."""
        async with self._db.connection() as connection:
            live = await unit_supervision.live_units(connection, self._start_timeout)
            idle = await unit_supervision.idle_units(connection, self._idle)
        for row in live:
            unit_id = row["unit_id"]
            if unit_id not in self._pending and not self._locks[unit_id].locked():
                await self._check_live(unit_id, row["state"], row["late"], row["registered"])
        for unit_id in idle:
            await self._stop_idle(unit_id)

    async def _check_live(self, unit_id: str, state: str, late: bool, registered: bool) -> None:
        status = await self._launcher.status(unit_id)
        # A unit this launcher does not know may run elsewhere (another replica's Pod): it is
        # lost only once its registration lapses.
        gone = status.phase is UnitPhase.FAILED or (
            status.phase is UnitPhase.STOPPED and not registered and (state == "RUNNING" or late)
        )
        if gone:
            message = status.message or "the unit is not running (its registration lapsed)"
            if await self._set_state(
                unit_id, "FAILED", message, when=unit_supervision.still_in(state)
            ):
                log.warning("computing unit failed", extra={"unit_id": unit_id, "why": message})
        elif state == "PROVISIONING" and late:
            async with self._locks[unit_id]:
                await self._launcher.stop(unit_id)
                await self._set_state(
                    unit_id,
                    "FAILED",
                    f"the unit did not start within {self._start_timeout:g} s",
                    when=unit_supervision.STILL_PROVISIONING,
                )

    async def _stop_idle(self, unit_id: str) -> None:
        async with self._locks[unit_id]:
            stopped = await self._set_state(
                unit_id,
                "STOPPED",
                f"stopped after {self._idle:g} s without executions",
                when=unit_supervision.still_idle(self._idle),
            )
            if stopped:
                await self._launcher.stop(unit_id)
                log.info("idle computing unit stopped", extra={"unit_id": unit_id})

    async def close(self) -> None:
        for task in list(self._launching):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.pool is not None:
            await self.pool.close()
        await self._launcher.close()
