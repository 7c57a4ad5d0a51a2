"""The credential the registry issues a computing unit when it launches it.

The unit presents it on every call it makes as itself; the registry then lets it
act only for itself and on the executions bound to it. This is the one place a
unit credential is made.
"""

from __future__ import annotations

from service_runtime.auth import UNIT_ROLE, mint_token

#: Long enough for a unit's life between two launches (each launch issues a new one).
CREDENTIAL_TTL_SECONDS = 30 * 24 * 3600.0


def issue_unit_credential(jwt_secret: str, unit_id: str) -> str:
    """A token whose subject is the unit, with role UNIT."""
    return mint_token(jwt_secret, unit_id, role=UNIT_ROLE, ttl_seconds=CREDENTIAL_TTL_SECONDS)
