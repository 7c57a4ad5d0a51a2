"""A server's certificate kept in memory and replaced when it is renewed: a computing unit's.

A unit's certificate comes, with its key, in files the unit reads at start and removes before
users' code runs; so it cannot be read again from files as the services' are (see
server_credentials). It is short-lived: before half its life is over the unit asks the registry
for a new one for the same key (a certificate signing request in its heartbeat, see
cu_service.lease), and the new one is served from the next handshake on; connections already
open keep theirs.
"""

from __future__ import annotations

import datetime
import threading

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from service_runtime.config import read_setting_file
from service_runtime.tls.server_credentials import (
    CertificateFiles,
    LoadedCertificate,
    dynamic_credentials,
    log_loaded,
    parse_certificate,
)


class HeldCertificate:
    """A certificate chain and its key, in memory; renew() replaces the chain."""

    def __init__(self, chain_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None) -> None:
        """ValueError (never showing the key) if they do not hold together."""
        self._key_pem = key_pem
        self._client_ca_pem = client_ca_pem
        self._current = parse_certificate(chain_pem, key_pem, client_ca_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("a held certificate's key must be an EC key")
        self._key = key
        # gRPC's handshakes (fetch) and the heartbeat (renew) are on different threads.
        self._lock = threading.Lock()
        self._renewed: LoadedCertificate | None = None
        log_loaded(self._current.certificate, "TLS certificate loaded")

    @classmethod
    def from_files(cls, files: CertificateFiles) -> HeldCertificate:
        """Reads the files now (ValueError naming one that cannot be used)."""
        return cls(
            read_setting_file(files.certificate_chain, "the certificate file", secret=False),
            read_setting_file(files.private_key, "the private key file", secret=True),
            read_setting_file(files.client_ca, "the client CA file", secret=False)
            if files.client_ca
            else None,
        )

    @property
    def certificate(self) -> x509.Certificate:
        """The certificate served now (the chain's first)."""
        return self._current.certificate

    def server_credentials(self, *, require_client_certificate: bool) -> grpc.ServerCredentials:
        if require_client_certificate and self._client_ca_pem is None:
            raise ValueError("requiring client certificates needs the client CAs")
        return dynamic_credentials(
            self._current, self.fetch, require_client_certificate=require_client_certificate
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """The renewed certificate, once, for gRPC's next handshake; None: no change."""
        with self._lock:
            renewed, self._renewed = self._renewed, None
        return None if renewed is None else renewed.configuration

    def renewal_due(self, now: datetime.datetime | None = None) -> bool:
        """Whether half the certificate's life is over."""
        certificate = self.certificate
        start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
        return (now or datetime.datetime.now(datetime.UTC)) >= start + (end - start) / 2

    def signing_request(self) -> bytes:
        """A PEM certificate signing request for this key, proving the unit holds it; the
        issuer decides what the certificate names."""
        subject = self.certificate.subject
        request = x509.CertificateSigningRequestBuilder().subject_name(subject)
        return request.sign(self._key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    def renew(self, chain_pem: bytes) -> None:
        """Serves chain_pem (for this key) from the next handshake on; ValueError, keeping the
        current one, if it is not a chain for this key."""
        loaded = parse_certificate(chain_pem, self._key_pem, self._client_ca_pem)
        with self._lock:
            self._current = self._renewed = loaded
        log_loaded(loaded.certificate, "TLS certificate renewed")
