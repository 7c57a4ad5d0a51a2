"""Which service of the mesh may call which, by its client certificate, and that the token a
call carries fits the certificate it came with.

The certificate says which service calls, the token for whom. With client certificates
required, a server takes each of its gRPC services' calls only from the peers its rules name,
and only with a token that service may carry:

- a computing unit's credential (alone, or acting for a user) with that unit's certificate,
  ``spiffe://texera-lake/unit/<the same unit id>``;
- a service's token with the certificate of the service it names (the gateway's);
- a user's internal token with the certificate of a service that forwards users' calls: the
  gateway, or the result service (which asks the registry for the calling user);
- an execution's token from any peer, or none: an execution's Spark tasks call without a
  client certificate (they run beside users' code and never hold the unit's key), and the
  token alone binds the call to that execution's tables while it runs.

Without client certificates required, nothing here applies: tokens alone decide, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from service_runtime.auth import Identity
from service_runtime.call_steps import PUBLIC_SERVICES
from service_runtime.config import ServerSettings
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from service_runtime.tls.identity import (
    GATEWAY,
    RESULT_SERVICE,
    UNIT,
    AllowedPeers,
    service_identity,
    unit_identity,
)
from service_runtime.tls.peers import CallCheck, peer_identity, refuse_unless_allowed

#: The registry's internal services, which units, the gateway and the result service call.
REGISTRY_INTERNAL_SERVICES = tuple(
    f"texera.lake.internal.v1.{name}"
    for name in ("ExecutionLedgerService", "UnitLeaseService", "ExecutionCredentialService")
)

GATEWAY_ONLY = AllowedPeers(exact=frozenset({service_identity(GATEWAY)}))
#: Every computing unit, by the prefix of their identities.
EVERY_UNIT = AllowedPeers(prefixes=(f"{service_identity(UNIT)}/",))
#: The services that carry users' internal tokens.
USER_CARRIERS = frozenset({service_identity(GATEWAY), service_identity(RESULT_SERVICE)})


@dataclass(frozen=True)
class CallerRules:
    """The peers each gRPC service of a server takes calls from; default for the others."""

    default: AllowedPeers
    by_service: Mapping[str, AllowedPeers] = field(default_factory=dict)

    def peers_of(self, service: str) -> AllowedPeers:
        return self.by_service.get(service, self.default)


#: A computing unit serves users' calls, which only the gateway forwards.
UNIT_RULES = CallerRules(default=GATEWAY_ONLY)
#: The registry: its internal services for units, the gateway and the result service; its
#: public services (warehouses, units, executions' deletion, retention) for the gateway.
REGISTRY_RULES = CallerRules(
    default=GATEWAY_ONLY,
    by_service=dict.fromkeys(
        REGISTRY_INTERNAL_SERVICES,
        AllowedPeers(exact=USER_CARRIERS, prefixes=EVERY_UNIT.prefixes),
    ),
)
#: The result service serves users' reads, which only the gateway forwards.
RESULT_RULES = CallerRules(default=GATEWAY_ONLY)


def token_mismatch(identity: Identity, peer: str) -> str | None:
    """Why a token may not come with the certificate naming peer; None when it may."""
    if identity.is_execution:
        return None
    unit = identity if identity.is_unit else identity.via
    if unit is not None and unit.is_unit:
        expected = unit_identity(unit.user_id)
        return None if peer == expected else f"unit {unit.user_id}'s credential came from {peer}"
    if identity.is_service:
        expected = service_identity(identity.user_id)
        return None if peer == expected else f"{identity.user_id}'s token came from {peer}"
    if identity.is_user:
        return None if peer in USER_CARRIERS else f"a user's token came from {peer}"
    return f"a {identity.role} token is not taken from {peer}"


def check_caller(
    rules: CallerRules, service: str, call: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """Raises ServiceError unless the call's certificate may call service and fits its token:
    UNAUTHENTICATED without an identity, PERMISSION_DENIED otherwise."""
    refuse_unless_allowed(rules.peers_of(service), call)
    peer = peer_identity(call)
    identity = identity_var.get()
    if peer is None or identity is None:  # refused above; no token: a public service
        return
    if (mismatch := token_mismatch(identity, peer)) is not None:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"the token does not fit the client certificate: {mismatch}",
            reason="PEER_TOKEN_MISMATCH",
        )


def caller_rules(settings: ServerSettings, rules: CallerRules) -> list[grpc.aio.ServerInterceptor]:
    """The interceptor that enforces rules when the server requires client certificates (only
    then are peers known); none otherwise. Health checks and reflection are exempt."""
    if not settings.tls_require_client_certificate:
        return []
    return [CallCheck(lambda service, call: check_caller(rules, service, call), PUBLIC_SERVICES)]
