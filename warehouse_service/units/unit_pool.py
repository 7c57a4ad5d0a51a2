"""The warm pool: computing units started and warmed up before anyone needs one.

For each size class the pool keeps `size` units started by the launcher with no identity
(see unit_launcher.hand_over). When the supervisor launches a user's unit of a pooled
size, it takes one, ready ones first, and hands it over: the unit's id, owner, credential
and certificate are bound only then, and the unit never comes back to the pool. Each round
of refill (a background job) replaces pooled units whose process ended (or that did not warm
up in time), notes which are warm, and starts what is missing, one unit warming at a time: warming a JVM takes a core,
and the users' executions need the others.

The pool's list lives in this registry's memory. The process launcher's pooled units are its
children and end with it; pooled Pods outlive it, and the next registry's first round adopts
those of its size classes (and stops the others).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence

from unit_launcher.base import Launcher, UnitPhase, UnitSpec
from unit_launcher.size_class import SizeClass

log = logging.getLogger("warehouse_service.units.unit_pool")


def new_pool_id() -> str:
    return f"pool-{secrets.token_hex(8)}"


class UnitPool:
    def __init__(
        self,
        launcher: Launcher,
        settings: Mapping[str, str],
        classes: Sequence[SizeClass],
        size: int,
        *,
        warm_timeout_seconds: float = 300.0,
    ) -> None:
        self._launcher = launcher
        self._settings = dict(settings)
        self._size = size
        #: Pooled units by size class, oldest first.
        self._units: dict[SizeClass, list[str]] = {size_class: [] for size_class in classes}
        #: Pooled units that are warm and wait for a hand-over.
        self._ready: set[str] = set()
        #: When each pooled unit was started (a unit not warm within warm_timeout_seconds is
        #: replaced: a stuck one would keep the pool from refilling).
        self._started: dict[str, float] = {}
        self._warm_timeout = warm_timeout_seconds
        self._adopted = False

    def take(self, cores: int, memory_mib: int) -> str | None:
        """A pooled unit of this size, no longer the pool's: a ready one if there is one,
        else the one that started first (its hand-over waits until it is warm); None when
        the pool keeps none of this size."""
        units = self._units.get(SizeClass(cores, memory_mib))
        if not units:
            return None
        chosen = next((pool_id for pool_id in units if pool_id in self._ready), units[0])
        self._forget(units, chosen)
        return chosen

    def counts(self) -> dict[SizeClass, tuple[int, int]]:
        """Per size class: units pooled, and how many of them are ready."""
        return {
            size_class: (len(units), len(self._ready.intersection(units)))
            for size_class, units in self._units.items()
        }

    async def refill(self) -> int:
        """One round: pooled units that ended are replaced, warm ones noted, and a missing
        one started if none is warming; how many units it started."""
        if not self._adopted:
            await self._adopt()
        for units in self._units.values():
            await self._check(units)
        warming = any(
            pool_id not in self._ready for units in self._units.values() for pool_id in units
        )
        if warming:
            return 0
        for size_class, units in self._units.items():
            if len(units) < self._size:
                await self._start(size_class, units)
                return 1
        return 0

    async def _check(self, units: list[str]) -> None:
        for pool_id in list(units):
            status = await self._launcher.status(pool_id)
            if pool_id not in units:  # taken while this round waited
                continue
            late = time.monotonic() - self._started[pool_id] > self._warm_timeout
            if status.phase is not UnitPhase.RUNNING or (late and pool_id not in self._ready):
                self._forget(units, pool_id)
                await self._launcher.stop(pool_id)
                log.warning(
                    "a pooled unit ended before it was handed over; it is replaced"
                    if status.phase is not UnitPhase.RUNNING
                    else "a pooled unit did not warm up in time; it is replaced",
                    extra={"pool_id": pool_id},
                )
            elif (
                pool_id not in self._ready
                and await self._launcher.pooled_ready(pool_id)
                and pool_id in units  # not taken while it was asked
            ):
                self._ready.add(pool_id)
                log.info("pooled unit ready", extra={"pool_id": pool_id})

    async def _adopt(self) -> None:
        for pool_id, size_class in await self._launcher.pooled_units():
            units = self._units.get(size_class)
            if units is None or len(units) >= self._size:
                await self._launcher.stop(pool_id)
                log.info("a pooled unit found was not needed; stopped", extra={"pool_id": pool_id})
            elif pool_id not in units:
                units.append(pool_id)
                self._started[pool_id] = time.monotonic()
                log.info("a pooled unit found is kept", extra={"pool_id": pool_id})
        self._adopted = True

    def _forget(self, units: list[str], pool_id: str) -> None:
        units.remove(pool_id)
        self._ready.discard(pool_id)
        self._started.pop(pool_id, None)

    async def _start(self, size_class: SizeClass, units: list[str]) -> None:
        pool_id = new_pool_id()
        spec = UnitSpec(
            unit_id=pool_id,
            owner_user_id="",
            cores=size_class.cores,
            memory_mib=size_class.memory_mib,
            settings=self._settings,
        )
        await self._launcher.launch_pooled(spec)
        units.append(pool_id)
        self._started[pool_id] = time.monotonic()
        log.info("pooled unit started", extra={"pool_id": pool_id, "size": str(size_class)})

    async def close(self) -> None:
        """Stops the pooled units."""
        for units in self._units.values():
            while units:
                pool_id = units[-1]
                self._forget(units, pool_id)
                await self._launcher.stop(pool_id)
