"""Computing units' certificates: issued by the registry's issuer (an intermediate of the mesh
CA constrained to units' names), held in memory by the unit's server, renewed from a signing
request for the same key and served from the next handshake on, with no failed call."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from service_runtime.config import ConfigError, ServerSettings
from service_runtime.errors import ServiceError
from service_runtime.tls.authority import MeshAuthority
from service_runtime.tls.held_certificate import HeldCertificate
from service_runtime.tls.identity import (
    GATEWAY,
    UNIT_DOMAIN,
    service_identity,
    unit_identity,
    unit_server_name,
)
from service_runtime.tls.mesh_client import MeshClientTls, mesh_channel
from tests.unit.tls_files import (
    CertificatePaths,
    MeshFiles,
    served_certificate,
    tls_server,
    who_am_i,
)
from warehouse_service.units.unit_certificates import REQUEST_FIELD, UnitCertificates

UNIT = "cu-Held_1"
MINUTE = datetime.timedelta(seconds=60)


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


def _issuer(mesh: MeshFiles) -> MeshAuthority:
    return mesh.authority.issue_authority(
        "units' issuer", lifetime=datetime.timedelta(days=1), dns_domain=UNIT_DOMAIN
    )


def _launched(mesh: MeshFiles, unit_id: str = UNIT) -> tuple[UnitCertificates, HeldCertificate]:
    """The registry's issuer and what a unit launched by it holds."""
    certificates = UnitCertificates(_issuer(mesh), MINUTE)
    handed = certificates.at_launch(unit_id)
    held = HeldCertificate(
        handed["TEXERA_LAKE_CU_TLS_CERTIFICATE"].encode(),
        handed["TEXERA_LAKE_CU_TLS_KEY"].encode(),
        mesh.ca_bundle.read_bytes(),
    )
    return certificates, held


def _unit_server_settings() -> ServerSettings:
    """Mutual TLS on a free loopback port; the certificate is held, not read from files."""
    return ServerSettings(host="127.0.0.1", port=0, tls_require_client_certificate=True)


def _as_gateway(mesh: MeshFiles, port: int, server_name: str) -> grpc.aio.Channel:
    gateway = mesh.issue("gateway", service_identity(GATEWAY))
    tls = MeshClientTls.from_files(
        str(mesh.ca_bundle),
        certificate_chain=str(gateway.certificate),
        private_key=str(gateway.key),
    )
    # Its own connection each time: each channel is a new handshake.
    options = [("grpc.use_local_subchannel_pool", 1)]
    return mesh_channel(f"127.0.0.1:{port}", tls, server_name=server_name, options=options)


async def _handshake_refused(mesh: MeshFiles, port: int, server_name: str) -> bool:
    """Whether the gateway's call to port, meaning server_name, fails in the handshake."""
    async with _as_gateway(mesh, port, server_name) as channel:
        health: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/grpc.health.v1.Health/Check"
        )
        try:
            await health(b"", timeout=10)
        except grpc.aio.AioRpcError as error:
            return error.code() == grpc.StatusCode.UNAVAILABLE
    return False


def _names(certificate: x509.Certificate) -> x509.SubjectAlternativeName:
    return certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def test_a_units_certificate_names_the_unit_alone_and_lives_its_lifetime(
    mesh: MeshFiles,
) -> None:
    _, held = _launched(mesh)
    names = _names(held.certificate)
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [unit_identity(UNIT)]
    assert names.get_values_for_type(x509.DNSName) == [unit_server_name(UNIT)]
    assert names.get_values_for_type(x509.IPAddress) == []
    now = datetime.datetime.now(datetime.UTC)
    assert held.certificate.not_valid_after_utc <= now + MINUTE
    assert not held.renewal_due(now)
    assert held.renewal_due(now + MINUTE / 2)


async def test_the_gateway_reaches_a_unit_by_its_name_and_no_other(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    _, held = _launched(mesh)
    async with tls_server(_unit_server_settings(), jwt_secret, held) as server:
        async with _as_gateway(mesh, server.port, unit_server_name(UNIT)) as channel:
            assert await who_am_i(channel, jwt_secret) == service_identity(GATEWAY)
        # The gateway meaning another unit, which this one's address once was: refused.
        assert await _handshake_refused(mesh, server.port, unit_server_name("cu-other"))


async def test_the_units_issuer_cannot_make_a_server_certificate_for_a_services_host(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    forged = _issuer(mesh).issue(service_identity("warehouse-service"), lifetime=MINUTE)
    held = HeldCertificate(forged.chain_pem, forged.private_key_pem, mesh.ca_bundle.read_bytes())
    async with tls_server(_unit_server_settings(), jwt_secret, held) as server:
        # The issuer's name constraints permit no IP address and no name but units'.
        assert await _handshake_refused(mesh, server.port, "localhost")


async def test_a_renewed_certificate_is_served_to_new_connections_with_no_failed_call(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    certificates, held = _launched(mesh)
    gateway = mesh.issue("gateway-client", service_identity(GATEWAY))

    def served() -> x509.Certificate:
        return served_certificate(
            server.port, mesh.ca_bundle, server_name=unit_server_name(UNIT), client=gateway
        )

    async with (
        tls_server(_unit_server_settings(), jwt_secret, held) as server,
        _as_gateway(mesh, server.port, unit_server_name(UNIT)) as kept_open,
    ):
        first = await asyncio.to_thread(served)
        await who_am_i(kept_open, jwt_secret)
        renewed = certificates.renewed(UNIT, held.signing_request())
        held.renew(renewed)
        second = await asyncio.to_thread(served)
        assert second.serial_number != first.serial_number
        assert second.public_key() == first.public_key()  # the key the unit kept
        assert held.certificate.serial_number == second.serial_number
        await who_am_i(kept_open, jwt_secret)  # the connection open before goes on
        async with _as_gateway(mesh, server.port, unit_server_name(UNIT)) as channel:
            await who_am_i(channel, jwt_secret)


def _signing_request(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, name: str) -> bytes:
    """A request asking for much more than a unit's certificate."""
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(name), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM)


def test_a_renewal_names_the_calling_unit_alone_whatever_the_request_asks(
    mesh: MeshFiles,
) -> None:
    certificates, _ = _launched(mesh)
    key = ec.generate_private_key(ec.SECP256R1())
    chain = certificates.renewed(UNIT, _signing_request(key, service_identity(GATEWAY)))
    leaf, issuer = x509.load_pem_x509_certificates(chain)
    assert leaf.public_key() == key.public_key()
    assert _names(leaf).get_values_for_type(x509.UniformResourceIdentifier) == [unit_identity(UNIT)]
    assert _names(leaf).get_values_for_type(x509.DNSName) == [unit_server_name(UNIT)]
    leaf.verify_directly_issued_by(issuer)
    issuer.verify_directly_issued_by(mesh.authority.authority.certificate)


def _tampered(request: bytes) -> bytes:
    """The request with its subject changed after it was signed."""
    der = bytearray(x509.load_pem_x509_csr(request).public_bytes(serialization.Encoding.DER))
    der[der.index(b"gateway")] ^= 0x01
    return x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize(
    ("request_pem", "description"),
    [
        (b"not a request", "must be a PEM certificate signing request"),
        (
            _signing_request(rsa.generate_private_key(65537, 2048), "rsa"),
            "must be for an EC key on P-256 or P-384",
        ),
        (
            _tampered(
                _signing_request(ec.generate_private_key(ec.SECP256R1()), "spiffe://x/gateway")
            ),
            "must be signed by the key it is for",
        ),
    ],
)
def test_a_signing_request_that_does_not_hold_up_is_refused_naming_its_field(
    mesh: MeshFiles, request_pem: bytes, description: str
) -> None:
    certificates, _ = _launched(mesh)
    with pytest.raises(ServiceError) as refused:
        certificates.renewed(UNIT, request_pem)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [(v.field, v.description) for v in refused.value.violations] == [
        (REQUEST_FIELD, description)
    ]


def test_a_chain_for_another_key_is_not_served(mesh: MeshFiles) -> None:
    certificates, held = _launched(mesh)
    before = held.certificate.serial_number
    other = certificates.renewed(
        UNIT, _signing_request(ec.generate_private_key(ec.SECP256R1()), "x")
    )
    with pytest.raises(ValueError, match="does not match"):
        held.renew(other)
    assert held.certificate.serial_number == before
    assert held.fetch() is None  # nothing new for the next handshake


def test_an_issuer_whose_key_is_not_its_certificates_is_a_config_error(
    mesh: MeshFiles, tmp_path: Path
) -> None:
    issuer = _issuer(mesh).authority
    other = CertificatePaths(tmp_path / "issuer.pem", tmp_path / "other-key.pem")
    issuer.write(other.certificate, tmp_path / "issuer-key.pem")
    mesh.issue("unrelated").key.rename(other.key)
    with pytest.raises(ConfigError, match="is not the EC key") as refused:
        UnitCertificates.from_files(str(other.certificate), str(other.key), MINUTE)
    assert "PRIVATE KEY" not in str(refused.value)
