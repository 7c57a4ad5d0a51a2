"""The computing units the registry knows, their load, and a channel to each.

The directory reads the registry's list on a timer, on the gateway's own
account. A unit is healthy while the registry says so and its lease has not
run out. Between two reads, the submissions the gateway itself routed count
towards a unit's load, so a burst of submissions spreads over the units, and
a unit that refused a connection is passed over for a while.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from gateway.forwarding import Backend
from service_runtime.auth import SERVICE_ROLE, USER_ROLE, bearer
from service_runtime.context import current_identity
from service_runtime.errors import ServiceError
from service_runtime.internal_tokens import MESH_AUDIENCE, TokenExchange, unit_audience
from texera.lake.v1 import registry_service_pb2, registry_service_pb2_grpc

log = logging.getLogger("gateway.units")
rs = registry_service_pb2
#: How long a unit that refused a connection is passed over.
SUSPECT_SECONDS = 5.0
GATEWAY_SUBJECT = "gateway"


class UnitDirectory:
    def __init__(
        self,
        registry: grpc.aio.Channel,
        tokens: TokenExchange,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry_service_pb2_grpc.RegistryServiceStub(registry)
        self._tokens = tokens
        self._clock = clock
        self._units: dict[str, rs.ComputingUnit] = {}
        self._routed: dict[str, int] = {}
        self._suspect_until: dict[str, float] = {}
        self._backends: dict[str, Backend] = {}
        self.loaded = False

    async def refresh(self) -> None:
        """Reads every unit from the registry; raises what the registry call raised."""
        metadata = (bearer(self._tokens.token(GATEWAY_SUBJECT, SERVICE_ROLE, MESH_AUDIENCE)),)
        units: dict[str, rs.ComputingUnit] = {}
        page_token = ""
        while True:
            response = await self._registry.ListComputingUnits(
                rs.ListComputingUnitsRequest(page_size=1000, page_token=page_token),
                metadata=metadata,
                timeout=10,
            )
            units.update((u.computing_unit_id, u) for u in response.computing_units)
            page_token = response.next_page_token
            if not page_token:
                break
        self._units, self._routed, self.loaded = units, {}, True
        await self._close_gone()

    async def _close_gone(self) -> None:
        live = {f"{unit.computing_unit_id}@{unit.endpoint}" for unit in self._units.values()}
        for key in [k for k in self._backends if k not in live]:
            await self._backends.pop(key).close()

    def _healthy(self, unit: rs.ComputingUnit) -> bool:
        now = self._clock()
        return (
            unit.state == rs.COMPUTING_UNIT_STATE_HEALTHY
            and unit.lease_expire_time.ToSeconds() > now
            and self._suspect_until.get(unit.computing_unit_id, 0.0) <= now
        )

    def healthy_units(self) -> list[rs.ComputingUnit]:
        return [unit for unit in self._units.values() if self._healthy(unit)]

    def _load(self, unit: rs.ComputingUnit) -> float:
        busy = unit.running_executions + unit.queued_executions
        return (busy + self._routed.get(unit.computing_unit_id, 0)) / max(unit.capacity, 1)

    def least_loaded(self) -> rs.ComputingUnit:
        """The healthy unit with the least work per slot; UNAVAILABLE when there is none."""
        healthy = self.healthy_units()
        if not healthy:
            raise ServiceError(
                grpc.StatusCode.UNAVAILABLE,
                "no computing unit is healthy; retry later",
                reason="NO_HEALTHY_COMPUTING_UNIT",
                retry_delay_seconds=5.0,
            )
        return min(healthy, key=lambda unit: (self._load(unit), unit.computing_unit_id))

    def named(self, unit_id: str) -> rs.ComputingUnit:
        """The unit with that id if it is healthy; NOT_FOUND or UNAVAILABLE otherwise."""
        unit = self._units.get(unit_id)
        if unit is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"computing unit {unit_id} not found")
        if not self._healthy(unit):
            raise ServiceError(
                grpc.StatusCode.UNAVAILABLE,
                f"computing unit {unit_id} is not healthy; retry later or submit without it",
                reason="COMPUTING_UNIT_UNAVAILABLE",
                metadata={"computing_unit_id": unit_id},
                retry_delay_seconds=5.0,
            )
        return unit

    def find(self, unit_id: str) -> rs.ComputingUnit | None:
        """The unit with that id if it is healthy, else None."""
        unit = self._units.get(unit_id)
        return unit if unit is not None and self._healthy(unit) else None

    def routed(self, unit: rs.ComputingUnit) -> None:
        """Counts a submission sent to unit until the registry's next word on its load."""
        self._routed[unit.computing_unit_id] = self._routed.get(unit.computing_unit_id, 0) + 1

    def refused(self, unit: rs.ComputingUnit) -> None:
        """Passes over a unit that did not answer for SUSPECT_SECONDS."""
        log.warning(
            "computing unit unreachable", extra={"computing_unit_id": unit.computing_unit_id}
        )
        self._suspect_until[unit.computing_unit_id] = self._clock() + SUSPECT_SECONDS

    def backend(self, unit: rs.ComputingUnit) -> Backend:
        """The unit's backend; calls to it carry the caller's token for that unit alone."""
        key = f"{unit.computing_unit_id}@{unit.endpoint}"
        if key not in self._backends:
            audience = unit_audience(unit.computing_unit_id)
            self._backends[key] = Backend(
                unit.endpoint,
                token=lambda: self._tokens.token(current_identity().user_id, USER_ROLE, audience),
            )
        return self._backends[key]

    async def close(self) -> None:
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                await backend.close()
        self._backends.clear()
