"""The mesh's identities and the development CA's certificates and files."""

from __future__ import annotations

import datetime
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from service_runtime.tls.authority import CLOCK_SKEW, SERVICE_LIFETIME, MeshAuthority
from service_runtime.tls.files import write_atomically
from service_runtime.tls.identity import (
    AllowedPeers,
    service_identity,
    spiffe_id,
    unit_identity,
)


def test_identities_are_spiffe_ids_in_the_mesh_trust_domain() -> None:
    assert service_identity("gateway") == "spiffe://texera-lake/gateway"
    assert unit_identity("cu-7") == "spiffe://texera-lake/unit/cu-7"


@pytest.mark.parametrize("segment", ["", ".", "..", "a/b", "a b", "ü"])
def test_a_path_segment_spiffe_refuses_is_refused(segment: str) -> None:
    with pytest.raises(ValueError, match="not a SPIFFE ID"):
        spiffe_id("unit", segment)


def test_allowed_peers_take_exact_ids_and_prefixes() -> None:
    allowed = AllowedPeers.parse(" spiffe://texera-lake/gateway ,spiffe://texera-lake/unit/*")
    assert allowed.allows("spiffe://texera-lake/gateway")
    assert allowed.allows("spiffe://texera-lake/unit/cu-1")
    assert not allowed.allows("spiffe://texera-lake/gateway-2")
    assert not allowed.allows("spiffe://texera-lake/units/cu-1")
    assert not allowed.allows("spiffe://texera-lake/result-service")
    assert not allowed.allows(None)
    assert not AllowedPeers.parse("")


@pytest.mark.parametrize(
    "entry", ["gateway", "https://texera-lake/gateway", "spiffe://texera-lake/", "spiffe://x/a*"]
)
def test_allowed_peers_refuse_what_is_not_an_id(entry: str) -> None:
    with pytest.raises(ValueError, match="not a SPIFFE ID"):
        AllowedPeers.parse(entry)


def test_an_issued_certificate_names_its_identity_hosts_and_both_ends_of_a_connection() -> None:
    authority = MeshAuthority.create()
    issued = authority.issue(
        unit_identity("cu-1"),
        lifetime=SERVICE_LIFETIME,
        dns_names=["cu-1.units.svc"],
        ip_addresses=[ipaddress.IPv4Address("10.0.0.7")],
    )
    certificate = issued.certificate
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        "spiffe://texera-lake/unit/cu-1"
    ]
    assert names.get_values_for_type(x509.DNSName) == ["cu-1.units.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.IPv4Address("10.0.0.7")]
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # Valid from a little before it was issued, for clocks behind this one, for its lifetime.
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime == SERVICE_LIFETIME + CLOCK_SKEW
    certificate.verify_directly_issued_by(authority.authority.certificate)


def test_a_short_lived_certificate_is_valid_from_its_issue_for_its_lifetime() -> None:
    issued_at = datetime.datetime.now(datetime.UTC)
    certificate = (
        MeshAuthority.create()
        .issue(unit_identity("cu-1"), lifetime=datetime.timedelta(seconds=60))
        .certificate
    )
    assert certificate.not_valid_before_utc <= issued_at - datetime.timedelta(seconds=14)
    assert certificate.not_valid_after_utc >= issued_at + datetime.timedelta(seconds=59)


def test_certificates_outside_their_validity_can_be_issued() -> None:
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    authority = MeshAuthority.create()
    expired = authority.issue(unit_identity("cu-1"), valid_from=now - 2 * day, lifetime=day)
    not_yet = authority.issue(unit_identity("cu-1"), valid_from=now + day, lifetime=day)
    assert expired.certificate.not_valid_after_utc < now
    assert not_yet.certificate.not_valid_before_utc > now


def test_keys_are_written_for_their_owner_alone_and_certificates_for_all(
    tmp_path: Path,
) -> None:
    authority = MeshAuthority.create()
    authority.issue(service_identity("gateway"), lifetime=SERVICE_LIFETIME).write(
        tmp_path / "gateway.pem", tmp_path / "gateway.key"
    )
    authority.write_bundle(tmp_path / "ca.pem")
    assert stat.S_IMODE((tmp_path / "gateway.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "gateway.pem").stat().st_mode) == 0o644
    assert b"PRIVATE KEY" not in (tmp_path / "ca.pem").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "ca.pem",
        "gateway.key",
        "gateway.pem",
    ]


def test_a_file_written_atomically_replaces_the_old_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"old")
    path.chmod(0o644)
    write_atomically(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]
