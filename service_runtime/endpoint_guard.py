"""Which storage endpoints the platform may connect to: none that point inside it.

A warehouse's endpoint is chosen by its user, and the registry and the catalog
send signed requests to it. An endpoint whose host is, or resolves to, a
loopback, private, link-local, shared, multicast, unspecified or reserved
address, or a cloud metadata service, is refused, unless the operator lists it
as allowed (exact ``scheme://host:port``). Numeric IPv4 forms are read as the
system's resolver reads them (``2130706433``, ``0177.0.0.1``, ``0x7f.1``), and
IPv6 forms that embed an IPv4 address are judged by that address. Every
address a name resolves to must be acceptable; a connection then goes to one
of the addresses checked (see ``checked_addresses``), so that a name that
resolves differently the second time (DNS rebinding) gains nothing.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: (host, port) -> the addresses a connection to host would try, as text.
Resolver = Callable[[str, int], Sequence[str]]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMERIC_IPV4 = re.compile(r"^[0-9a-fA-FxX.]+$")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
    }
)


class EndpointRefused(Exception):
    """The endpoint, or an address it resolves to, is not one the platform may connect to."""


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for host, as a connection would use them."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _host_name(host: str) -> str:
    return host.strip("[]").lower().removesuffix(".")


def endpoint_key(scheme: str, host: str, port: int | None) -> str:
    """The ``scheme://host:port`` form that allow-list entries are compared in."""
    scheme = scheme.lower()
    name = _host_name(host)
    shown = f"[{name}]" if ":" in name else name
    return f"{scheme}://{shown}:{port or _DEFAULT_PORTS.get(scheme, 0)}"


def parse_allowed(value: str) -> frozenset[str]:
    """The allow-list setting (``scheme://host:port`` entries, comma separated)."""
    allowed = set()
    for entry in filter(None, (e.strip() for e in value.split(","))):
        parts = urlsplit(entry)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or port is None:
            raise ValueError(f"{entry!r} is not of the form http(s)://host:port")
        allowed.add(endpoint_key(parts.scheme, parts.hostname, port))
    return frozenset(allowed)


def literal_address(host: str) -> IPAddress | None:
    """The address host spells, in any form the system's resolver accepts, or None for a name."""
    name = _host_name(host)
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if _NUMERIC_IPV4.match(name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_problem(address: IPAddress) -> str | None:
    """What kind of non-public address this is, or None for a public one."""
    embedded = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if embedded is not None:
        return address_problem(embedded)
    kinds = (
        (address in _METADATA_ADDRESSES, "a cloud metadata address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address in _SHARED, "a shared (carrier-grade NAT) address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    )
    return next((kind for refused, kind in kinds if refused), None)


def _name_problem(name: str) -> str | None:
    if name in _METADATA_NAMES:
        return "names a cloud metadata service"
    if name == "localhost" or name.endswith(".localhost"):
        return "names the local machine"
    return None


@dataclass(frozen=True)
class EndpointGuard:
    """The endpoint rules with the operator's allow-list and a resolver."""

    allowed: frozenset[str] = frozenset()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_setting(cls, value: str, resolver: Resolver = system_resolver) -> EndpointGuard:
        return cls(parse_allowed(value), resolver)

    def is_allowed(self, scheme: str, host: str, port: int | None) -> bool:
        return endpoint_key(scheme, host, port) in self.allowed

    def checked_addresses(self, host: str, port: int) -> list[IPAddress]:
        """Every address host resolves to, once; raises EndpointRefused if any is not public."""
        name = _host_name(host)
        if problem := _name_problem(name):
            raise EndpointRefused(f"{name} {problem}")
        if (literal := literal_address(name)) is not None:
            if problem := address_problem(literal):
                raise EndpointRefused(f"{name} is {problem}")
            return [literal]
        try:
            found = self.resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise EndpointRefused(f"{name} does not resolve") from exc
        addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
        if not addresses:
            raise EndpointRefused(f"{name} does not resolve")
        for address in addresses:
            if problem := address_problem(address):
                raise EndpointRefused(f"{name} resolves to {problem}")
        return addresses

    def check(self, endpoint: str) -> None:
        """Raises EndpointRefused unless endpoint (an http(s) URL) may be connected to."""
        parts = urlsplit(endpoint)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        if not self.is_allowed(scheme, host, port):
            self.checked_addresses(host, port)

    def pinned(self, endpoint: str) -> str:
        """endpoint as a client that resolves names itself should be given it: checked, and
        for plain http with the host replaced by a checked address, so that the client's own
        lookup cannot land elsewhere (https keeps the name, which TLS verifies)."""
        parts = urlsplit(endpoint)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        if self.is_allowed(scheme, host, port):
            return endpoint
        address = self.checked_addresses(host, port)[0]
        if scheme != "http":
            return endpoint
        shown = f"[{address}]" if address.version == 6 else str(address)
        return f"http://{shown}:{port}"

    def problem(self, endpoint: str) -> str | None:
        """Why endpoint is refused, or None."""
        try:
            self.check(endpoint)
        except EndpointRefused as exc:
            return str(exc)
        return None
