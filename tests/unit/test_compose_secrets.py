"""deploy/compose/make_secrets.py: the secrets of the registry's two clients (its own and its
reader client), each generated once, reach the registry as files of its own and Keycloak in the
realm it imports, and nowhere else; the stack's CA and the certificates it issues verify for
what each is for, and each key is a file only its reader may read."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from deploy.compose import make_secrets
from deploy.compose.make_secrets import (
    CA_FILE,
    CLIENT_SECRET_FILES,
    KEYCLOAK_UID,
    METRICS_TOKEN_FILE,
    PROMETHEUS_UID,
    READER_CLIENT_ID,
    REALM_TEMPLATE,
    REGISTRY_CLIENT_ID,
    SERVERS,
    UIDS,
)
from service_runtime.tls.authority import IssuedCertificate, MeshAuthority
from service_runtime.tls.identity import UNIT_DOMAIN, service_identity, unit_server_name

#: The owner given to a file or folder (by inode: files are written under a temporary name
#: and renamed), since tests do not change owners for real.
Owners = dict[int, int]


@dataclass(frozen=True)
class Written:
    """The folders make_secrets.main wrote, as docker-compose.yml's volumes."""

    secrets: Path
    keycloak_import: Path
    server_tls: Path
    authority: Path
    owners: Owners

    def owner(self, path: Path) -> int | None:
        return self.owners.get(path.stat().st_ino)

    def run(self) -> None:
        make_secrets.main(self.secrets, self.keycloak_import, self.server_tls, self.authority)


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Written:
    given: Owners = {}
    monkeypatch.setattr(
        os, "chown", lambda path, uid, _gid: given.update({os.stat(path).st_ino: uid})
    )
    monkeypatch.setenv("TEXERA_LAKE_JWT_SECRET", "j" * 40)
    monkeypatch.setenv("REGISTRY_DATABASE_URL", "postgresql://registry:pw@db/texera_lake")
    result = Written(
        secrets=tmp_path / "secrets",
        keycloak_import=tmp_path / "import",
        server_tls=tmp_path / "server-tls",
        authority=tmp_path / "mesh-ca",
        owners=given,
    )
    result.keycloak_import.mkdir()
    result.run()
    return result


def _realm_secret(keycloak_import: Path, client_id: str = REGISTRY_CLIENT_ID) -> str:
    realm = json.loads((keycloak_import / REALM_TEMPLATE.name).read_text())
    (client,) = [c for c in realm["clients"] if c["clientId"] == client_id]
    return str(client["secret"])


def test_the_registrys_clients_are_its_own_and_its_reader_client() -> None:
    assert CLIENT_SECRET_FILES == {
        REGISTRY_CLIENT_ID: "catalog_client_secret",
        READER_CLIENT_ID: "catalog_reader_client_secret",
    }


@pytest.mark.parametrize("client_id", sorted(CLIENT_SECRET_FILES))
def test_the_client_secret_is_the_registrys_file_and_the_imported_realms(
    written: Written, client_id: str
) -> None:
    secret_file = written.secrets / "warehouse-service" / CLIENT_SECRET_FILES[client_id]
    secret = secret_file.read_text()
    assert len(secret) >= 32
    assert _realm_secret(written.keycloak_import, client_id) == secret
    realm_file = written.keycloak_import / REALM_TEMPLATE.name
    assert (realm_file.stat().st_mode & 0o777, written.owner(realm_file)) == (0o600, KEYCLOAK_UID)
    assert written.keycloak_import.stat().st_mode & 0o777 == 0o700
    assert written.owner(written.keycloak_import) == KEYCLOAK_UID
    assert (secret_file.stat().st_mode & 0o777, written.owner(secret_file)) == (0o600, 0)
    others = [p for p in written.secrets.rglob("*") if p.is_file() and p != secret_file]
    assert all(secret not in p.read_text() for p in others)


def test_the_two_clients_secrets_differ(written: Written) -> None:
    assert _realm_secret(written.keycloak_import, REGISTRY_CLIENT_ID) != _realm_secret(
        written.keycloak_import, READER_CLIENT_ID
    )


@pytest.mark.parametrize("client_id", sorted(CLIENT_SECRET_FILES))
def test_a_second_run_keeps_the_secret(written: Written, client_id: str) -> None:
    first = _realm_secret(written.keycloak_import, client_id)
    written.run()
    assert _realm_secret(written.keycloak_import, client_id) == first


@pytest.mark.parametrize("client_id", sorted(CLIENT_SECRET_FILES))
def test_a_template_with_a_real_secret_is_refused(client_id: str) -> None:
    realm = json.loads(REALM_TEMPLATE.read_text())
    for client in realm["clients"]:
        if client["clientId"] == client_id:
            client["secret"] = "committed-by-mistake"
    with pytest.raises(ValueError, match=f"{client_id} secret is not a placeholder"):
        make_secrets.realm_with_secrets(json.dumps(realm), {c: "new" for c in CLIENT_SECRET_FILES})


def test_one_metrics_token_reaches_each_service_and_the_scraper_in_files_of_their_own(
    written: Written,
) -> None:
    readers = {written.secrets / service: uid for service, uid in UIDS.items()}
    readers[written.secrets / "metrics"] = PROMETHEUS_UID
    [token] = {(folder / METRICS_TOKEN_FILE).read_text() for folder in readers}
    assert len(token) >= 32
    for folder, uid in readers.items():
        token_file = folder / METRICS_TOKEN_FILE
        assert (token_file.stat().st_mode & 0o777, written.owner(token_file)) == (0o600, uid)
        assert (folder.stat().st_mode & 0o777, written.owner(folder)) == (0o700, uid)
    written.run()
    assert (written.secrets / "metrics" / METRICS_TOKEN_FILE).read_text() == token


def _certificates(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def _ca(written: Written) -> x509.Certificate:
    [ca] = _certificates(written.secrets / "public" / CA_FILE)
    return ca


def _server_verifier(ca: x509.Certificate, name: str) -> Callable[[list[x509.Certificate]], object]:
    """Verifies a chain (leaf first) as a TLS client calling name would."""
    subject: x509.GeneralName
    try:
        subject = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        subject = x509.DNSName(name)
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(subject)
    return lambda chain: verifier.verify(chain[0], chain[1:])


def _extended_usages(certificate: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_the_ca_is_the_same_everywhere_and_its_key_stays_in_its_own_volume(
    written: Written,
) -> None:
    ca_pem = (written.secrets / "public" / CA_FILE).read_bytes()
    assert (written.server_tls / CA_FILE).read_bytes() == ca_pem
    assert (written.server_tls / "minio" / "CAs" / CA_FILE).read_bytes() == ca_pem
    assert (written.authority / CA_FILE).read_bytes() == ca_pem
    assert written.authority.stat().st_mode & 0o777 == 0o700
    key = written.authority / "ca-key.pem"
    assert key.stat().st_mode & 0o777 == 0o600
    key_pem = key.read_bytes()
    for volume in (written.secrets, written.server_tls, written.keycloak_import):
        assert all(key_pem not in p.read_bytes() for p in volume.rglob("*") if p.is_file())
    constraints = _ca(written).extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True


@pytest.mark.parametrize("service", sorted(UIDS))
def test_each_service_certificate_names_its_identity_and_host_for_both_ends(
    written: Written, service: str
) -> None:
    folder = written.secrets / service
    chain = _certificates(folder / "tls_certificate")
    ca = _ca(written)
    for name in (service, "localhost", "127.0.0.1"):  # its compose name; its health check
        _server_verifier(ca, name)(chain)
    with pytest.raises(VerificationError):
        _server_verifier(ca, "gateway" if service != "gateway" else "result-service")(chain)
    client = PolicyBuilder().store(Store([ca])).build_client_verifier()
    verified = client.verify(chain[0], chain[1:])
    uris = [
        s.value for s in verified.subjects or [] if isinstance(s, x509.UniformResourceIdentifier)
    ]
    assert uris == [service_identity(service)]
    leaf = chain[0]
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (usage.digital_signature, usage.key_cert_sign) == (True, False)
    assert _extended_usages(leaf) == {
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    }
    key = folder / "tls_key"
    assert (key.stat().st_mode & 0o777, written.owner(key)) == (0o600, UIDS[service])
    assert written.owner(folder) == UIDS[service]
    assert folder.stat().st_mode & 0o777 == 0o700
    assert _key_matches(key, leaf)


def _key_matches(key: Path, certificate: x509.Certificate) -> bool:
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return private.public_key().public_bytes(*der) == certificate.public_key().public_bytes(*der)


def test_the_units_issuer_signs_units_names_only(written: Written) -> None:
    folder = written.secrets / "warehouse-service"
    [issuer_certificate] = _certificates(folder / "unit_issuer_certificate")
    key_file = folder / "unit_issuer_key"
    assert (key_file.stat().st_mode & 0o777, written.owner(key_file)) == (0o600, 0)
    assert _key_matches(key_file, issuer_certificate)
    constraints = issuer_certificate.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [x509.DNSName(UNIT_DOMAIN)]
    assert constraints.value.excluded_subtrees == [
        x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
        x509.IPAddress(ipaddress.ip_network("::/0")),
    ]
    basic = issuer_certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (basic.ca, basic.path_length) == (True, 0)
    # What the registry issues from it (as warehouse_service.units.unit_certificates does) verifies
    # for a unit's name, and a certificate it signs for a service's name does not.
    private = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    issuer = MeshAuthority(IssuedCertificate(issuer_certificate, private))
    lifetime = datetime.timedelta(hours=1)
    unit = issuer.issue(
        "spiffe://texera-lake/unit/u1",
        lifetime=lifetime,
        dns_names=[unit_server_name("u1")],
        ip_addresses=[],
    )
    chain = x509.load_pem_x509_certificates(unit.chain_pem)
    _server_verifier(_ca(written), unit_server_name("u1"))(chain)
    forged = issuer.issue(
        service_identity("gateway"), lifetime=lifetime, dns_names=["gateway"], ip_addresses=[]
    )
    with pytest.raises(VerificationError):
        _server_verifier(_ca(written), "gateway")(x509.load_pem_x509_certificates(forged.chain_pem))


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_each_server_outside_the_mesh_has_a_server_certificate_for_its_names(
    written: Written, server: str
) -> None:
    uid, names = SERVERS[server]
    folder = written.server_tls / server
    [certificate] = _certificates(folder / "public.crt")
    for name in names:
        _server_verifier(_ca(written), name)([certificate])
    assert _extended_usages(certificate) == {ExtendedKeyUsageOID.SERVER_AUTH}
    alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert alternative.value.get_values_for_type(x509.UniformResourceIdentifier) == []
    key = folder / "private.key"
    assert (key.stat().st_mode & 0o777, written.owner(key)) == (0o600, uid)
    assert (folder.stat().st_mode & 0o777, written.owner(folder)) == (0o700, uid)
    assert _key_matches(key, certificate)


def test_a_second_run_keeps_the_ca_and_renews_the_certificates(written: Written) -> None:
    ca = (written.authority / CA_FILE).read_bytes()
    leaf = (written.secrets / "gateway" / "tls_certificate").read_bytes()
    written.run()
    assert (written.authority / CA_FILE).read_bytes() == ca
    assert (written.secrets / "gateway" / "tls_certificate").read_bytes() != leaf
    _server_verifier(_ca(written), "gateway")(
        _certificates(written.secrets / "gateway" / "tls_certificate")
    )


def test_a_ca_that_would_expire_before_a_new_certificate_is_made_anew(written: Written) -> None:
    old = MeshAuthority.create(lifetime=make_secrets.CERTIFICATE_LIFETIME / 2)
    old.authority.write(written.authority / CA_FILE, written.authority / "ca-key.pem")
    written.run()
    assert _ca(written).serial_number != old.authority.certificate.serial_number
    assert _ca(written).not_valid_after_utc > (
        datetime.datetime.now(datetime.UTC) + make_secrets.CERTIFICATE_LIFETIME
    )
