"""The credentials the registry issues to the computing units it launches.

A unit's credential is an internal token signed with the registry's key: role ``UNIT``, the
unit's id as subject, its owner and the generation of its launch as claims. With it a unit
acts only as itself: on the executions bound to it, and for a user only together with that
user's token minted for the unit (see service_runtime.internal_tokens). It lives minutes: the
registry hands the unit a fresh one with each registration and heartbeat, and refuses every
credential of a launch that ended (see warehouse_service.store.unit_launches).
"""

from __future__ import annotations

from service_runtime.auth import UNIT_ROLE, Identity
from service_runtime.internal_tokens import MESH_AUDIENCE, REGISTRY_ISSUER, TokenSigner
from warehouse_service.store.unit_launches import GENERATION_CLAIM

#: The claim naming the unit's owner.
OWNER_CLAIM = "owner"
#: How long a unit's credential lives unless the registry's settings say otherwise.
CREDENTIAL_TTL_SECONDS = 600.0


class UnitCredentials:
    def __init__(self, signing_key_pem: str, ttl_seconds: float = CREDENTIAL_TTL_SECONDS) -> None:
        self._signer = TokenSigner(signing_key_pem, REGISTRY_ISSUER)
        self._ttl = ttl_seconds

    def issue(self, unit_id: str, owner_user_id: str, generation: str) -> str:
        """A credential of the unit's launch `generation`."""
        return self._signer.mint(
            unit_id,
            UNIT_ROLE,
            MESH_AUDIENCE,
            ttl_seconds=self._ttl,
            claims={OWNER_CLAIM: owner_user_id, GENERATION_CLAIM: generation},
        )

    def renewed(self, unit: Identity) -> str:
        """A fresh credential for the unit that called with a (verified, current) one: of the
        same launch, for the same owner."""
        return self.issue(
            unit.user_id, unit.claims.get(OWNER_CLAIM, ""), unit.claims.get(GENERATION_CLAIM, "")
        )
