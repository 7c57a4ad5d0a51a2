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
from service_runtime.auth import SERVICE_ROLE, USER_ROLE, bearer
from service_runtime.context import current_identity
from service_runtime.internal_tokens import (
    GATEWAY_SUBJECT,
    MESH_AUDIENCE,
    TokenExchange,
    unit_audience,
)
from service_runtime.tls.identity import unit_server_name
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc

log = logging.getLogger("gateway.units")
rs = registry_service_pb2
#: How long a unit that refused a connection is passed over.
SUSPECT_SECONDS = 5.0


class UnitDirectory:
    def __init__(
        self,
        registry: grpc.aio.Channel,
        tokens: TokenExchange,
        *,
        clock: Callable[[], float] = time.time,
        tls: MeshClientTls | None = None,
    ) -> None:
        self._tls = tls
        self._registry = registry_service_pb2_grpc.UnitLeaseServiceStub(registry)
        self._tokens = tokens
        self._clock = clock
        self._units: dict[str, rs.UnitRegistration] = {}
        self._suspect_until: dict[str, float] = {}
        self._backends: dict[str, Backend] = {}
        self.loaded = False

    async def refresh(self) -> None:
        """Reads every registration from the registry; raises what the registry call raised."""
        metadata = (bearer(self._tokens.token(GATEWAY_SUBJECT, SERVICE_ROLE, MESH_AUDIENCE)),)
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
        live = {f"{unit.computing_unit_id}@{unit.endpoint}" for unit in self._units.values()}
        for key in [k for k in self._backends if k not in live]:
            await self._backends.pop(key).close()

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
        """The unit's backend; calls to it carry the gateway's own token and the caller's,
        both for that unit alone (a unit takes a user's call only with the gateway's token
        beside it: service_runtime.through_gateway)."""
        key = f"{unit.computing_unit_id}@{unit.endpoint}"
        if key not in self._backends:
            audience = unit_audience(unit.computing_unit_id)
            self._backends[key] = Backend(
                unit.endpoint,
                token=lambda: self._tokens.token(GATEWAY_SUBJECT, SERVICE_ROLE, audience),
                on_behalf=lambda: self._tokens.token(
                    current_identity().user_id, USER_ROLE, audience
                ),
                tls=self._tls,
                # A unit's certificate names its id, not the address it was given.
                server_name=unit_server_name(unit.computing_unit_id),
            )
        return self._backends[key]

    async def close(self) -> None:
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                await backend.close()
        self._backends.clear()
