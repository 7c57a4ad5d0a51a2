"""The gatekeeper's tokens: one execution's grant, signed with the registry's key.

A token is an internal token of the registry for the audience ``catalog-gatekeeper`` (refused
by every gRPC port of the mesh, which take the audience ``mesh``), its subject the execution,
its claims the warehouse, the unit, the submitter and the source tables it may read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from service_runtime.auth import EXECUTION_ROLE, AuthenticationError
from service_runtime.internal_tokens import (
    REGISTRY_ISSUER,
    InternalTokenVerifier,
    TokenSigner,
    TrustedIssuer,
    load_private_key,
)

GATEKEEPER_AUDIENCE = "catalog-gatekeeper"
#: A table: its namespace's levels, then its name.
TableName = tuple[str, ...]


@dataclass(frozen=True)
class ExecutionGrant:
    """What one execution's token lets its unit reach."""

    execution_id: str
    warehouse_id: str
    unit_id: str
    owner_user_id: str
    #: The source tables it may load, read only.
    reads: frozenset[TableName] = frozenset()


class GatekeeperTokens:
    """Issues and checks the gatekeeper's tokens."""

    def __init__(self, signing_key_pem: str, lifetime_seconds: float) -> None:
        self._signer = TokenSigner(signing_key_pem, REGISTRY_ISSUER)
        self.lifetime_seconds = lifetime_seconds
        issuer = TrustedIssuer(
            load_private_key(signing_key_pem).public_key(), frozenset({EXECUTION_ROLE})
        )
        self._verifier = InternalTokenVerifier({REGISTRY_ISSUER: issuer}, GATEKEEPER_AUDIENCE)

    def issue(self, grant: ExecutionGrant) -> tuple[str, float]:
        """A token for grant, and when it expires (seconds since the epoch)."""
        expires = time.time() + self.lifetime_seconds
        token = self._signer.mint(
            grant.execution_id,
            EXECUTION_ROLE,
            GATEKEEPER_AUDIENCE,
            ttl_seconds=self.lifetime_seconds,
            claims={
                "warehouse": grant.warehouse_id,
                "unit": grant.unit_id,
                "owner": grant.owner_user_id,
                "reads": json.dumps(sorted(grant.reads)),
            },
        )
        return token, expires

    def grant(self, authorization: str | None) -> ExecutionGrant:
        """The grant a bearer token carries; AuthenticationError if it is not a valid,
        unexpired gatekeeper token."""
        identity = self._verifier.verify(authorization)
        claims = identity.claims
        try:
            reads = frozenset(tuple(str(part) for part in t) for t in json.loads(claims["reads"]))
            return ExecutionGrant(
                identity.user_id, claims["warehouse"], claims["unit"], claims["owner"], reads
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AuthenticationError("not a catalog gatekeeper token") from exc
