"""A certificate authority for the mesh, for development and tests.

It issues each service and computing unit a certificate naming its identity (identity) as a
SPIFFE ID, with the host names and addresses clients reach it by, for both ends of a
connection (server and client authentication). Keys are ECDSA on P-256. A production
deployment gets its certificates elsewhere (cert-manager, say); what the servers check is
the same.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service_runtime.tls.files import PRIVATE_MODE, PUBLIC_MODE, write_atomically

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: How long a certificate of the authority itself lasts.
AUTHORITY_LIFETIME = datetime.timedelta(days=365)
#: How long a service's certificate lasts (the embedded stack issues new ones at each start).
SERVICE_LIFETIME = datetime.timedelta(days=30)
#: How long a computing unit's certificate lasts: units are launched with a new one.
UNIT_LIFETIME = datetime.timedelta(hours=12)
#: How far back a certificate's validity starts, for clocks a little behind this one.
CLOCK_SKEW = datetime.timedelta(minutes=5)
#: Whom a certificate of the mesh is for when not said: this machine.
LOCAL_NAMES = ("localhost",)
LOCAL_ADDRESSES: tuple[IPAddress, ...] = (
    ipaddress.IPv4Address("127.0.0.1"),
    ipaddress.IPv6Address("::1"),
)


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and its private key."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def private_key_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, certificate_path: Path, key_path: Path) -> None:
        """Writes the key (0600) and then the certificate (0644), each replaced whole."""
        write_atomically(key_path, self.private_key_pem, mode=PRIVATE_MODE)
        write_atomically(certificate_path, self.certificate_pem, mode=PUBLIC_MODE)


def _validity(
    valid_from: datetime.datetime | None, lifetime: datetime.timedelta
) -> tuple[datetime.datetime, datetime.datetime]:
    """(not before, not after): from valid_from as given, or from a little before now."""
    start = valid_from or datetime.datetime.now(datetime.UTC) - CLOCK_SKEW
    return start, start + lifetime


def _subject_key_id(key: ec.EllipticCurvePrivateKey) -> x509.SubjectKeyIdentifier:
    return x509.SubjectKeyIdentifier.from_public_key(key.public_key())


class MeshAuthority:
    """Issues the mesh's certificates from a CA of its own."""

    def __init__(self, authority: IssuedCertificate) -> None:
        self.authority = authority

    @classmethod
    def create(
        cls,
        *,
        common_name: str = "texera-lake mesh CA",
        lifetime: datetime.timedelta = AUTHORITY_LIFETIME,
        valid_from: datetime.datetime | None = None,
    ) -> MeshAuthority:
        """A new authority with a new key; it may sign certificates, not other authorities."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        not_before, not_after = _validity(valid_from, lifetime)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(signs_certificates=True), critical=True)
            .add_extension(_subject_key_id(key), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(IssuedCertificate(certificate, key))

    @property
    def certificate_pem(self) -> bytes:
        """The CA bundle that clients and servers verify the mesh's certificates against."""
        return self.authority.certificate_pem

    def write_bundle(self, path: Path) -> None:
        """Writes the authority's certificate (0644), replaced whole; never its key."""
        write_atomically(path, self.certificate_pem, mode=PUBLIC_MODE)

    def issue(
        self,
        identity: str,
        *,
        lifetime: datetime.timedelta,
        dns_names: Sequence[str] = LOCAL_NAMES,
        ip_addresses: Sequence[IPAddress] = LOCAL_ADDRESSES,
        valid_from: datetime.datetime | None = None,
    ) -> IssuedCertificate:
        """A certificate naming identity (a SPIFFE ID) and the names and addresses it is
        reached by, valid for lifetime from valid_from (default: a little before now; a
        valid_from in the past or the future gives the expired and the not yet valid
        certificates tests need)."""
        key = ec.generate_private_key(ec.SECP256R1())
        not_before, not_after = _validity(valid_from, lifetime)
        names: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(identity),
            *(x509.DNSName(name) for name in dns_names),
            *(x509.IPAddress(address) for address in ip_addresses),
        ]
        authority = self.authority
        certificate = (
            x509.CertificateBuilder()
            # The identity is the SAN; the subject only helps people reading the certificate.
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
            .issuer_name(authority.certificate.subject)
            .public_key(key.public_key())
            # Random, so that a certificate issued again is told apart by its serial.
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(signs_certificates=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(_subject_key_id(key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    authority.private_key.public_key()
                ),
                critical=False,
            )
            .sign(authority.private_key, hashes.SHA256())
        )
        return IssuedCertificate(certificate, key)


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """An authority's key signs certificates (and revocation lists) only; a service's key
    signs its TLS handshakes only."""
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
