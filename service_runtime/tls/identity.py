"""The mesh's identities as SPIFFE IDs, and lists of the identities a server allows.

A certificate of the mesh names one identity as its only URI subject alternative name
(gRPC reports a verified peer's ``peer_spiffe_id`` only when there is exactly one):
``spiffe://texera-lake/<service>`` for a service and ``spiffe://texera-lake/unit/<unit id>``
for a computing unit.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

TRUST_DOMAIN = "texera-lake"
GATEWAY = "gateway"
WAREHOUSE_SERVICE = "warehouse-service"
RESULT_SERVICE = "result-service"
#: The first path segment of every computing unit's identity.
UNIT = "unit"
#: The DNS domain under which every computing unit's server name lies (see unit_server_name).
UNIT_DOMAIN = "unit.texera-lake"

#: A path segment as the SPIFFE ID standard allows it (and neither ``.`` nor ``..``).
_SEGMENT = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._-]+$")
_TRUST_DOMAIN = re.compile(r"^[a-z0-9._-]+$")
#: An entry of an allow-list: an ID, or an ID's leading segments and ``/*`` for every ID below.
_ALLOWED_ENTRY = re.compile(r"^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)*(/\*|/[A-Za-z0-9._-]+)$")


def spiffe_id(*path: str, trust_domain: str = TRUST_DOMAIN) -> str:
    """``spiffe://<trust domain>/<path…>``; ValueError for a segment the standard refuses."""
    if not _TRUST_DOMAIN.match(trust_domain):
        raise ValueError(f"not a SPIFFE trust domain: {trust_domain!r}")
    if not path or not all(_SEGMENT.match(segment) for segment in path):
        raise ValueError(f"not a SPIFFE ID path: {'/'.join(path)!r}")
    return f"spiffe://{trust_domain}/{'/'.join(path)}"


def service_identity(service: str) -> str:
    """The identity of a service of the mesh, for example ``spiffe://texera-lake/gateway``."""
    return spiffe_id(service)


def unit_identity(computing_unit_id: str) -> str:
    """The identity of one computing unit: ``spiffe://texera-lake/unit/<unit id>``."""
    return spiffe_id(UNIT, computing_unit_id)


def unit_server_name(computing_unit_id: str) -> str:
    """The DNS name a computing unit's certificate is issued for, and which its clients check
    (gRPC's ``grpc.ssl_target_name_override``): the unit's certificate is bound to its id, not
    to an address that another unit may hold next. A hash, since unit ids may hold what a DNS
    label may not (upper case, ``_``, 64 characters)."""
    digest = hashlib.sha256(computing_unit_id.encode()).hexdigest()[:32]
    return f"u{digest}.{UNIT_DOMAIN}"


@dataclass(frozen=True)
class AllowedPeers:
    """The identities a server takes calls from: exact SPIFFE IDs, and prefixes from entries
    ending in ``/*`` (``spiffe://texera-lake/unit/*`` allows every computing unit)."""

    exact: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowedPeers:
        """From a comma-separated list; ValueError naming the first malformed entry."""
        entries = [entry.strip() for entry in text.split(",") if entry.strip()]
        for entry in entries:
            if not _ALLOWED_ENTRY.match(entry):
                raise ValueError(
                    f"{entry!r} is not a SPIFFE ID (spiffe://texera-lake/gateway) or a prefix "
                    "of them (spiffe://texera-lake/unit/*)"
                )
        return cls(
            exact=frozenset(entry for entry in entries if not entry.endswith("/*")),
            prefixes=tuple(entry.removesuffix("*") for entry in entries if entry.endswith("/*")),
        )

    def __bool__(self) -> bool:
        return bool(self.exact or self.prefixes)

    def allows(self, peer: str | None) -> bool:
        if peer is None:
            return False
        return peer in self.exact or any(peer.startswith(prefix) for prefix in self.prefixes)
