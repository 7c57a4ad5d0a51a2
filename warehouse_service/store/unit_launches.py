"""Which launch of each computing unit is current: a unit's credential is good only while the
launch it was issued for lasts.

Each launch of a unit draws a new generation, kept on the unit's row and written into every
credential issued for that launch (``generation`` claim). A restart draws another one, a stop
or a deletion clears it: credentials of the earlier launch are refused from then on, wherever
they are. The registry checks every call a unit's credential makes (alone or for a user),
remembering each unit's current generation for a moment (REMEMBER_SECONDS) so that a unit's
calls cost no extra query each.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import grpc
from cachetools import TTLCache

from service_runtime.auth import Identity
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from warehouse_service.store.db import Database

#: The claim of a unit's credential that names its launch.
GENERATION_CLAIM = "generation"
#: How long a unit's current generation is remembered: a revoked credential is refused at
#: most this long after the launch it belongs to ended.
REMEMBER_SECONDS = 2.0


def new_generation() -> str:
    return secrets.token_urlsafe(12)


def revoked(unit_id: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.UNAUTHENTICATED,
        f"computing unit {unit_id}'s credential belongs to a launch that ended (the unit was "
        "restarted, stopped or deleted)",
        reason="UNIT_CREDENTIAL_REVOKED",
        metadata={"computing_unit_id": unit_id},
    )


class UnitLaunches:
    """The current generation of each unit's launch, from the units' rows."""

    def __init__(self, db: Database, remember_seconds: float = REMEMBER_SECONDS) -> None:
        self._db = db
        self._remembered: TTLCache[str, str] = TTLCache(
            maxsize=100_000, ttl=remember_seconds, timer=time.monotonic
        )

    async def is_current(self, unit_id: str, generation: str) -> bool:
        """Whether generation is that of the unit's current launch. Only a match is
        remembered: a launch that has just begun is never refused for what an earlier read
        said."""
        if generation and self._remembered.get(unit_id) == generation:
            return True
        async with self._db.connection() as connection:
            current = await connection.fetchval(
                "SELECT credential_generation FROM units WHERE unit_id = $1", unit_id
            )
        if current is None or current != generation:
            return False
        self._remembered[unit_id] = current
        return True

    async def check(self, service: str, call: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Refuses a call whose unit credential (alone or carrying a user's token) belongs to
        a launch that is not the unit's current one."""
        unit = _unit_of(identity_var.get())
        if unit is None:
            return
        if not await self.is_current(unit.user_id, unit.claims.get(GENERATION_CLAIM, "")):
            raise revoked(unit.user_id)

    def forget(self, unit_id: str) -> None:
        """Drops what is remembered of the unit (its launch changed in this process)."""
        self._remembered.pop(unit_id, None)


def _unit_of(identity: Identity | None) -> Identity | None:
    if identity is None:
        return None
    unit = identity if identity.is_unit else identity.via
    return unit if unit is not None and unit.is_unit else None
