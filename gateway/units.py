"""Where the running computing units are, and a channel to each.

The directory reads the registry's registrations on a timer, on the gateway's
own account, and learns of a unit the moment the registry hands it out for a
submission. A unit is reachable while its registration is healthy and its lease
has not run out; one that refused a connection is passed over for a while.
Which unit a submission may go to is the registry's decision (see executions).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from gateway.forwarding import Backend
from service_runtime.auth import SERVICE_ROLE, bearer, mint_token
from texera.lake.v1 import registry_service_pb2, registry_service_pb2_grpc

log = logging.getLogger("gateway.units")
rs = registry_service_pb2
#: How long a unit that refused a connection is passed over.
SUSPECT_SECONDS = 5.0
GATEWAY_SUBJECT = "gateway"


def gateway_credential(jwt_secret: str) -> tuple[str, str]:
    """The metadata entry with which the gateway calls the registry as itself."""
    return bearer(mint_token(jwt_secret, GATEWAY_SUBJECT, role=SERVICE_ROLE, ttl_seconds=300))


class UnitDirectory:
    def __init__(
        self,
        registry: grpc.aio.Channel,
        jwt_secret: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry_service_pb2_grpc.RegistryServiceStub(registry)
        self._secret = jwt_secret
        self._clock = clock
        self._units: dict[str, rs.UnitRegistration] = {}
        self._suspect_until: dict[str, float] = {}
        self._backends: dict[str, Backend] = {}
        self.loaded = False

    async def refresh(self) -> None:
        """Reads every registration from the registry; raises what the registry call raised."""
        metadata = (gateway_credential(self._secret),)
        units: dict[str, rs.UnitRegistration] = {}
        page_token = ""
        while True:
            response = await self._registry.ListUnitRegistrations(
                rs.ListUnitRegistrationsRequest(page_size=1000, page_token=page_token),
                metadata=metadata,
                timeout=10,
            )
            units.update((u.computing_unit_id, u) for u in response.registrations)
            page_token = response.next_page_token
            if not page_token:
                break
        self._units, self.loaded = units, True
        await self._close_gone()

    async def _close_gone(self) -> None:
        endpoints = {unit.endpoint for unit in self._units.values()}
        for endpoint in [e for e in self._backends if e not in endpoints]:
            await self._backends.pop(endpoint).close()

    def remember(self, unit: rs.UnitRegistration) -> None:
        """Takes a registration the registry just handed out (fresher than the last read)."""
        self._units[unit.computing_unit_id] = unit
        self._suspect_until.pop(unit.computing_unit_id, None)

    def _healthy(self, unit: rs.UnitRegistration) -> bool:
        now = self._clock()
        return (
            unit.state == rs.UNIT_REGISTRATION_STATE_HEALTHY
            and unit.lease_expire_time.ToSeconds() > now
            and self._suspect_until.get(unit.computing_unit_id, 0.0) <= now
        )

    def find(self, unit_id: str) -> rs.UnitRegistration | None:
        """The unit with that id if it is healthy, else None."""
        unit = self._units.get(unit_id)
        return unit if unit is not None and self._healthy(unit) else None

    def refused(self, unit: rs.UnitRegistration) -> None:
        """Passes over a unit that did not answer for SUSPECT_SECONDS."""
        log.warning(
            "computing unit unreachable", extra={"computing_unit_id": unit.computing_unit_id}
        )
        self._suspect_until[unit.computing_unit_id] = self._clock() + SUSPECT_SECONDS

    def backend(self, unit: rs.UnitRegistration) -> Backend:
        if unit.endpoint not in self._backends:
            self._backends[unit.endpoint] = Backend(unit.endpoint)
        return self._backends[unit.endpoint]

    async def close(self) -> None:
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                await backend.close()
        self._backends.clear()
