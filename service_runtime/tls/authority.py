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
from dataclasses import dataclass, field
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
#: How long a computing unit's issuer lasts (the embedded stack makes a new one at each start).
UNIT_ISSUER_LIFETIME = datetime.timedelta(days=30)
#: How far back a certificate's validity starts, for clocks a little behind this one.
CLOCK_SKEW = datetime.timedelta(minutes=5)
#: Whom a certificate of the mesh is for when not said: this machine.
LOCAL_NAMES = ("localhost",)
LOCAL_ADDRESSES: tuple[IPAddress, ...] = (
    ipaddress.IPv4Address("127.0.0.1"),
    ipaddress.IPv6Address("::1"),
)


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate, its private key, and the intermediate authorities between it and the
    root (none for a certificate the root issued itself)."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey
    intermediates: tuple[x509.Certificate, ...] = field(default=())

    @property
    def certificate_pem(self) -> bytes:
        """The certificate alone."""
        return _pem(self.certificate)

    @property
    def chain_pem(self) -> bytes:
        """The certificate, then its intermediates: what a server or client presents."""
        return b"".join(map(_pem, (self.certificate, *self.intermediates)))

    @property
    def private_key_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, certificate_path: Path, key_path: Path) -> None:
        """Writes the key (0600) and then the chain (0644), each replaced whole."""
        write_atomically(key_path, self.private_key_pem, mode=PRIVATE_MODE)
        write_atomically(certificate_path, self.chain_pem, mode=PUBLIC_MODE)


def _validity(
    valid_from: datetime.datetime | None, lifetime: datetime.timedelta
) -> tuple[datetime.datetime, datetime.datetime]:
    """(not before, not after): from valid_from as given; else valid from a little before now
    (for clocks a little behind this one: CLOCK_SKEW, or a quarter of a short lifetime) until
    lifetime from now."""
    if valid_from is not None:
        return valid_from, valid_from + lifetime
    now = datetime.datetime.now(datetime.UTC)
    return now - min(CLOCK_SKEW, lifetime / 4), now + lifetime


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
        """A new root authority with a new key; below it, at most one level of intermediate
        authorities (issue_authority)."""
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
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(_key_usage(signs_certificates=True), critical=True)
            .add_extension(_subject_key_id(key), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(IssuedCertificate(certificate, key))

    def issue_authority(
        self,
        common_name: str,
        *,
        lifetime: datetime.timedelta,
        dns_domain: str,
        valid_from: datetime.datetime | None = None,
    ) -> MeshAuthority:
        """An intermediate authority that signs certificates only, whose certificates may name
        host names under dns_domain and no IP address at all (X.509 name constraints, which
        every client checks): a certificate it issues cannot pass for a service's server."""
        key = ec.generate_private_key(ec.SECP256R1())
        constraints = x509.NameConstraints(
            permitted_subtrees=[x509.DNSName(dns_domain)],
            excluded_subtrees=[
                x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
                x509.IPAddress(ipaddress.ip_network("::/0")),
            ],
        )
        certificate = (
            self._builder(common_name, key.public_key(), lifetime, valid_from)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(signs_certificates=True), critical=True)
            .add_extension(constraints, critical=True)
            .sign(self.authority.private_key, hashes.SHA256())
        )
        return MeshAuthority(IssuedCertificate(certificate, key, self._chain_above_leaves()))

    @property
    def certificate_pem(self) -> bytes:
        """The authority's own certificate: for a root, the CA bundle that clients and servers
        verify the mesh's certificates against."""
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
        """A certificate and a new key, naming identity (a SPIFFE ID) and the names and
        addresses it is reached by, valid for lifetime from valid_from (default: a little
        before now; a valid_from in the past or the future gives the expired and the not yet
        valid certificates tests need)."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = self.certify(
            identity,
            key.public_key(),
            lifetime=lifetime,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            valid_from=valid_from,
        )
        return IssuedCertificate(certificate, key, self._chain_above_leaves())

    def certify(
        self,
        identity: str,
        public_key: ec.EllipticCurvePublicKey,
        *,
        lifetime: datetime.timedelta,
        dns_names: Sequence[str] = LOCAL_NAMES,
        ip_addresses: Sequence[IPAddress] = LOCAL_ADDRESSES,
        valid_from: datetime.datetime | None = None,
    ) -> x509.Certificate:
        """A certificate for a key its holder keeps (from a signing request), as issue()."""
        names: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(identity),
            *(x509.DNSName(name) for name in dns_names),
            *(x509.IPAddress(address) for address in ip_addresses),
        ]
        return (
            # The identity is the SAN; the subject only helps people reading the certificate.
            self._builder(identity, public_key, lifetime, valid_from)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(signs_certificates=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(self.authority.private_key, hashes.SHA256())
        )

    def chain_pem(self, certificate: x509.Certificate) -> bytes:
        """certificate, which this authority issued, with the intermediates up to the root."""
        return b"".join(map(_pem, (certificate, *self._chain_above_leaves())))

    def _chain_above_leaves(self) -> tuple[x509.Certificate, ...]:
        """What a certificate this authority issues presents above itself: this authority and
        its intermediates, the root left out (verifiers hold it)."""
        if self.authority.certificate.issuer == self.authority.certificate.subject:
            return ()
        return (self.authority.certificate, *self.authority.intermediates)

    def _builder(
        self,
        subject: str,
        public_key: ec.EllipticCurvePublicKey,
        lifetime: datetime.timedelta,
        valid_from: datetime.datetime | None,
    ) -> x509.CertificateBuilder:
        """What every certificate this authority signs has in common."""
        not_before, not_after = _validity(valid_from, lifetime)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(self.authority.certificate.subject)
            .public_key(public_key)
            # Random, so that a certificate issued again is told apart by its serial.
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.authority.private_key.public_key()
                ),
                critical=False,
            )
        )


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
