"""A server's TLS credentials, which follow its certificate files: a certificate rotated on
disk is served from the next connection on, with no restart.

gRPC calls the fetcher before every TLS handshake. It compares the files' identity (device,
inode, size, modification time, through symlinks, as Kubernetes swaps the files of a mounted
secret) with those last read, and reads them again only when that changed. A pair that is not
whole is not served: files replaced while being read, or a key that does not match its
certificate (the certificate renamed into place, its key not yet); connections keep getting
the certificate served before until the files agree. Connections already open keep theirs.

The protocol is TLS 1.2 or later: gRPC core's minimum, which its Python API does not let
anyone lower; TLS 1.3 is negotiated when the client can.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from service_runtime.config import read_setting_file

log = logging.getLogger("service_runtime.tls")

Parsed = TypeVar("Parsed")
#: What identifies each file's current version: (device, inode, size, modified in ns).
FileStamp = tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class CertificateFiles:
    """Where a server's certificate lives: its chain (its own certificate first), its
    private key and, when it verifies clients' certificates, the CAs it trusts for them."""

    certificate_chain: str
    private_key: str
    client_ca: str = ""

    def paths(self) -> tuple[str, ...]:
        return tuple(
            path for path in (self.certificate_chain, self.private_key, self.client_ca) if path
        )

    def stamp(self) -> FileStamp:
        """The current version of every file; OSError if one is missing."""
        return tuple(
            (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
            for status in map(os.stat, self.paths())
        )


@dataclass(frozen=True)
class LoadedCertificate:
    """One consistent reading of the files, as gRPC takes it."""

    configuration: grpc.ServerCertificateConfiguration
    #: The server's own certificate (the chain's first).
    certificate: x509.Certificate
    #: Tells readings with the same content apart from changed ones.
    digest: bytes


def _public_key_der(certificate_or_key: x509.Certificate | PrivateKeyTypes) -> bytes:
    public_key = certificate_or_key.public_key()
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _unencrypted_key(pem: bytes) -> PrivateKeyTypes:
    return serialization.load_pem_private_key(pem, password=None)


def _parsed(parse: Callable[[bytes], Parsed], content: bytes, path: str, expected: str) -> Parsed:
    """parse(content); ValueError naming the file, never showing its content, if it fails."""
    try:
        return parse(content)
    except (ValueError, TypeError):  # TypeError: an encrypted key
        raise ValueError(f"{path} does not hold {expected}") from None


def load_certificate(files: CertificateFiles) -> LoadedCertificate:
    """Reads and checks the files: certificates that parse, a private key (unencrypted, in a
    file only its owner may read) that matches the first certificate. ValueError (never
    showing the key) if they do not hold together, OSError if a file cannot be read."""
    chain_pem = read_setting_file(files.certificate_chain, "the certificate file", secret=False)
    key_pem = read_setting_file(files.private_key, "the private key file", secret=True)
    client_ca_pem = (
        read_setting_file(files.client_ca, "the client CA file", secret=False)
        if files.client_ca
        else None
    )
    return parse_certificate(chain_pem, key_pem, client_ca_pem, names=files)


def parse_certificate(
    chain_pem: bytes,
    key_pem: bytes,
    client_ca_pem: bytes | None,
    *,
    names: CertificateFiles = CertificateFiles("the certificate", "its private key", "client CAs"),
) -> LoadedCertificate:
    """Checks a chain, its key and the client CAs as load_certificate does; names says what
    to call each in an error (the files' paths, when read from files)."""
    certificates = "PEM certificates"
    chain = _parsed(
        x509.load_pem_x509_certificates, chain_pem, names.certificate_chain, certificates
    )
    key = _parsed(_unencrypted_key, key_pem, names.private_key, "an unencrypted PEM private key")
    if client_ca_pem is not None:
        _parsed(x509.load_pem_x509_certificates, client_ca_pem, names.client_ca, certificates)
    if _public_key_der(key) != _public_key_der(chain[0]):
        raise ValueError(
            f"the private key ({names.private_key}) does not match the certificate "
            f"({names.certificate_chain})"
        )
    configuration = grpc.ssl_server_certificate_configuration(
        [(key_pem, chain_pem)], root_certificates=client_ca_pem
    )
    digest = hashlib.sha256()
    for content in (chain_pem, key_pem, client_ca_pem or b""):
        digest.update(len(content).to_bytes(8, "big") + content)
    return LoadedCertificate(configuration, chain[0], digest.digest())


def dynamic_credentials(
    initial: LoadedCertificate,
    fetch: Callable[[], grpc.ServerCertificateConfiguration | None],
    *,
    require_client_certificate: bool,
) -> grpc.ServerCredentials:
    """Server credentials that serve initial, then whatever fetch returns (None: no change),
    which gRPC calls before each handshake; with require_client_certificate, a client without
    a certificate from the client CAs is refused during the handshake."""
    # grpc takes None from the fetcher for "no change"; its type stubs do not say so.
    fetcher = cast("Callable[[], grpc.ServerCertificateConfiguration]", fetch)
    return grpc.dynamic_ssl_server_credentials(
        initial.configuration,
        fetcher,
        require_client_authentication=require_client_certificate,
    )


def log_loaded(certificate: x509.Certificate, event: str) -> None:
    """Logs a certificate now served: its serial and expiry, a warning if it is not valid."""
    now = datetime.datetime.now(datetime.UTC)
    facts = {
        "serial": f"{certificate.serial_number:x}",
        "not_after": certificate.not_valid_after_utc.isoformat(),
    }
    if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
        log.warning("%s, but it is not valid now: clients will refuse it", event, extra=facts)
    else:
        log.info(event, extra=facts)


class ReloadingCertificate:
    """A server's certificate read from its files, and read again when they change."""

    def __init__(self, files: CertificateFiles) -> None:
        """Reads the files; ValueError or OSError if they cannot be served."""
        self.files = files
        # The fetcher runs on gRPC's threads, possibly several handshakes at once.
        self._lock = threading.Lock()
        self._stamp, self._current = self._read()
        self._last_failure = ""
        log_loaded(self._current.certificate, "TLS certificate loaded")

    @property
    def current(self) -> LoadedCertificate:
        return self._current

    def server_credentials(self, *, require_client_certificate: bool) -> grpc.ServerCredentials:
        """Credentials for add_secure_port that serve the files' current certificate; with
        require_client_certificate, a client without a certificate from the client CAs is
        refused during the handshake."""
        if require_client_certificate and not self.files.client_ca:
            raise ValueError("requiring client certificates needs the client CAs' file")
        return dynamic_credentials(
            self._current, self.fetch, require_client_certificate=require_client_certificate
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """The new configuration if the files changed and hold together, else None."""
        with self._lock:
            try:
                if self.files.stamp() == self._stamp:
                    return None
                stamp, loaded = self._read()
            # Whatever fails, the server goes on with the certificate it has: an exception
            # here would reach gRPC's core and fail the handshake.
            except Exception as exc:
                self._report_failure(exc)
                return None
            self._stamp, self._last_failure = stamp, ""
            if loaded.digest == self._current.digest:
                return None
            self._current = loaded
            log_loaded(loaded.certificate, "TLS certificate reloaded")
            return loaded.configuration

    def _read(self) -> tuple[FileStamp, LoadedCertificate]:
        before = self.files.stamp()
        loaded = load_certificate(self.files)
        if self.files.stamp() != before:
            raise ValueError("the certificate files changed while they were read")
        return before, loaded

    def _report_failure(self, exc: Exception) -> None:
        """Logs why the files are not served, once for each new reason (not per connection)."""
        reason = str(exc) or type(exc).__name__
        if reason != self._last_failure:
            self._last_failure = reason
            log.warning(
                "TLS certificate files not reloaded; serving the previous certificate",
                extra={"reason": reason},
            )
