"""The storage endpoint rules: no endpoint that points inside the platform, names resolved."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service_runtime.endpoint_guard import EndpointGuard, EndpointRefused, parse_allowed

PUBLIC = "93.184.215.14"


class Resolver:
    """A resolver stub: names to addresses, counting lookups."""

    def __init__(self, names: dict[str, Sequence[str]]) -> None:
        self.names = names
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        if host not in self.names:
            raise OSError("name does not resolve")
        return self.names[host]


def _guard(allowed: str = "", **names: Sequence[str]) -> EndpointGuard:
    resolver = Resolver(
        {
            "s3.example.org": [PUBLIC, "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
            "localhost": ["127.0.0.1", "::1"],
            "loopback.example.org": ["127.0.0.1"],
            "mixed.example.org": [PUBLIC, "10.1.2.3"],
            "mapped.example.org": ["::ffff:169.254.169.254"],
            **{name.replace("_", "."): addresses for name, addresses in names.items()},
        }
    )
    return EndpointGuard.from_setting(allowed, resolver)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://s3.example.org",
        "https://s3.example.org:9000",
        f"http://{PUBLIC}:9000",
        "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:9000",
        "http://134744072",  # 8.8.8.8 in decimal
    ],
)
def test_public_endpoints_pass(endpoint: str) -> None:
    assert _guard().problem(endpoint) is None


@pytest.mark.parametrize(
    ("endpoint", "kind"),
    [
        ("http://127.0.0.1:9000", "loopback"),
        ("http://127.1.2.3", "loopback"),
        ("http://2130706433", "loopback"),  # decimal
        ("http://0177.0.0.1", "loopback"),  # octal
        ("http://0x7f000001", "loopback"),  # hex
        ("http://0x7f.0.0.1", "loopback"),
        ("http://[::1]:9000", "loopback"),
        ("http://[::ffff:127.0.0.1]:9000", "loopback"),
        ("http://[::ffff:7f00:1]", "loopback"),
        ("http://[64:ff9b::7f00:1]", "loopback"),  # NAT64
        ("http://[2002:7f00:1::]", "loopback"),  # 6to4
        ("http://0.0.0.0:9000", "unspecified"),
        ("http://0", "unspecified"),
        ("http://[::]:9000", "unspecified"),
        ("http://169.254.169.254", "metadata"),
        ("http://[::ffff:169.254.169.254]", "metadata"),
        ("http://[fd00:ec2::254]", "metadata"),
        ("http://169.254.170.2", "metadata"),
        ("http://100.100.100.200", "metadata"),
        ("http://169.254.1.1", "link-local"),
        ("http://[fe80::1]", "link-local"),
        ("http://10.0.0.5", "private"),
        ("http://172.16.0.1", "private"),
        ("http://192.168.1.1", "private"),
        ("http://[fd12::1]", "private"),
        ("http://[::ffff:10.0.0.5]", "private"),
        ("http://100.64.0.1", "shared"),
        ("http://[::ffff:100.64.0.1]", "shared"),
        ("http://224.0.0.1", "multicast"),
        ("http://[ff02::1]", "multicast"),
        ("http://240.0.0.1", "reserved"),  # "reserved" and "private" in Python's tables
        ("http://255.255.255.255", "address"),
    ],
)
def test_internal_addresses_are_refused(endpoint: str, kind: str) -> None:
    problem = _guard().problem(endpoint)
    assert problem is not None
    assert kind in problem or (kind == "reserved" and "private" in problem)


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("http://localhost:9000", "local machine"),
        ("http://localhost.:9000", "local machine"),
        ("http://LOCALHOST:9000", "local machine"),
        ("http://s3.localhost", "local machine"),
        ("http://metadata.google.internal", "metadata"),
        ("http://metadata.google.internal.", "metadata"),
        ("http://metadata", "metadata"),
        ("http://instance-data", "metadata"),
        ("http://loopback.example.org:9000", "resolves to a loopback"),
        ("http://loopback.example.org.:9000", "resolves to a loopback"),
        ("http://mapped.example.org", "resolves to a cloud metadata"),
        ("http://no-such-host.example.org", "does not resolve"),
    ],
)
def test_names_are_refused(endpoint: str, why: str) -> None:
    problem = _guard().problem(endpoint)
    assert problem is not None
    assert why in problem


def test_every_address_a_name_resolves_to_must_be_public() -> None:
    problem = _guard().problem("http://mixed.example.org:9000")
    assert problem is not None
    assert "private" in problem


def test_a_name_that_resolves_to_nothing_is_refused() -> None:
    assert _guard(empty_example_org=[]).problem("http://empty.example.org") is not None


def test_allowed_endpoints_pass_exactly() -> None:
    guard = _guard("http://127.0.0.1:9000, https://LocalHost.:8443")
    assert guard.problem("http://127.0.0.1:9000") is None
    assert guard.problem("http://127.0.0.1:9000/") is None
    assert guard.problem("https://localhost:8443") is None
    assert guard.problem("http://127.0.0.1:9001") is not None  # another port
    assert guard.problem("https://127.0.0.1:9000") is not None  # another scheme
    assert guard.problem("http://2130706433:9000") is not None  # another spelling
    assert guard.problem("http://localhost:8443") is not None


def test_default_ports_count_in_allowed_endpoints() -> None:
    guard = _guard("http://127.0.0.1:80")
    assert guard.problem("http://127.0.0.1") is None


def test_checked_addresses_resolve_once() -> None:
    guard = _guard()
    assert isinstance(guard.resolver, Resolver)
    addresses = guard.checked_addresses("s3.example.org", 443)
    assert [str(a) for a in addresses] == [PUBLIC, "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    assert guard.resolver.lookups == ["s3.example.org"]
    with pytest.raises(EndpointRefused):
        guard.checked_addresses("[::1]", 443)


@pytest.mark.parametrize("value", ["127.0.0.1:9000", "ftp://h:1", "http://h", "http://h:x"])
def test_malformed_allow_list_entries_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="http"):
        parse_allowed(value)


def test_pinned_endpoints_name_the_checked_address() -> None:
    guard = _guard(
        "http://127.0.0.1:9000", v6_example_org=["2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    )
    assert guard.pinned("http://s3.example.org") == f"http://{PUBLIC}:80"
    assert guard.pinned("http://v6.example.org:9000") == (
        "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:9000"
    )
    assert guard.pinned("https://s3.example.org") == "https://s3.example.org"
    assert guard.pinned("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    with pytest.raises(EndpointRefused):
        guard.pinned("http://loopback.example.org")
