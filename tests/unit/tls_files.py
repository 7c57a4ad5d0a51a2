"""Certificates on disk for the TLS tests, a server in this process that serves them, and
what a client sees of it."""

from __future__ import annotations

import datetime
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509

from gateway.rate_limit import RateLimiter
from gateway.service import WAREHOUSES, Admission, binding
from service_runtime.auth import bearer, mint_token
from service_runtime.config import ServerSettings
from service_runtime.server import RunningServer
from service_runtime.tls.authority import SERVICE_LIFETIME, MeshAuthority
from service_runtime.tls.held_certificate import HeldCertificate
from service_runtime.tls.identity import service_identity
from service_runtime.tls.mesh_client import MeshClientTls
from service_runtime.tls.peers import peer_identity
from tests.in_process import serving

#: The method the test server answers with the caller's identity (see WHO_AM_I).
WHO_AM_I = f"/{WAREHOUSES.full_name}/ListWarehouses"
SERVER_IDENTITY = service_identity("warehouse-service")


@dataclass(frozen=True)
class CertificatePaths:
    certificate: Path
    key: Path


@dataclass(frozen=True)
class MeshFiles:
    """A mesh CA and the certificates it issued, as files in one folder."""

    directory: Path
    authority: MeshAuthority
    ca_bundle: Path

    @classmethod
    def create(cls, directory: Path) -> MeshFiles:
        authority = MeshAuthority.create()
        authority.write_bundle(directory / "ca.pem")
        return cls(directory, authority, directory / "ca.pem")

    def issue(
        self,
        name: str,
        identity: str = SERVER_IDENTITY,
        *,
        authority: MeshAuthority | None = None,
        valid_from: datetime.datetime | None = None,
        lifetime: datetime.timedelta = SERVICE_LIFETIME,
    ) -> CertificatePaths:
        """name.pem and name.key, issued by authority (default: the mesh's)."""
        paths = CertificatePaths(self.directory / f"{name}.pem", self.directory / f"{name}.key")
        issued = (authority or self.authority).issue(
            identity, lifetime=lifetime, valid_from=valid_from
        )
        issued.write(paths.certificate, paths.key)
        return paths


def tls_settings(
    server: CertificatePaths,
    *,
    client_ca: Path | None = None,
    allowed_peers: str = "",
) -> ServerSettings:
    """A server's settings on a free loopback port, requiring client certificates from
    client_ca when given."""
    return ServerSettings(
        host="127.0.0.1",
        port=0,
        tls_certificate=str(server.certificate),
        tls_key=str(server.key),
        tls_client_ca=str(client_ca or ""),
        tls_require_client_certificate=client_ca is not None,
        tls_allowed_peers=allowed_peers,
    )


async def _who_am_i(request: bytes, call: Any) -> bytes:
    return (peer_identity(call) or "(none)").encode()


@asynccontextmanager
async def tls_server(
    settings: ServerSettings, jwt_secret: str, certificate: HeldCertificate | None = None
) -> AsyncIterator[RunningServer]:
    """The real RunningServer on settings (with certificate, if given, in place of the
    settings' files), answering WHO_AM_I with the caller's identity."""
    service = binding(WAREHOUSES, lambda method: _who_am_i, Admission(RateLimiter(1e6, 10**6)))
    async with serving([service], jwt_secret, settings=settings, certificate=certificate) as server:
        yield server


def tls_channel(
    port: int, mesh: MeshFiles, client: CertificatePaths | None = None, *, fresh: bool = False
) -> grpc.aio.Channel:
    """A channel to localhost:port that trusts the mesh CA, presenting client's certificate
    if given; fresh: its own connection, never one another channel of this process opened."""
    credentials = MeshClientTls.from_files(
        str(mesh.ca_bundle),
        certificate_chain=str(client.certificate) if client else "",
        private_key=str(client.key) if client else "",
    ).credentials()
    options = [("grpc.use_local_subchannel_pool", 1)] if fresh else []
    return grpc.aio.secure_channel(f"localhost:{port}", credentials, options=options)


async def who_am_i(channel: grpc.aio.Channel, jwt_secret: str) -> str:
    """The identity the server saw of this channel's caller; raises the call's error."""
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(WHO_AM_I)
    response = await call(b"", metadata=(bearer(mint_token(jwt_secret, "alice")),), timeout=10)
    return response.decode()


def served_certificate(
    port: int,
    ca_bundle: Path,
    *,
    server_name: str = "localhost",
    client: CertificatePaths | None = None,
    host: str = "127.0.0.1",
) -> x509.Certificate:
    """The certificate a new TLS connection to host:port is served, checked against
    ca_bundle and server_name, presenting client's certificate if given (blocking)."""
    context = ssl.create_default_context(cafile=str(ca_bundle))
    context.set_alpn_protocols(["h2"])
    if client is not None:
        context.load_cert_chain(client.certificate, client.key)
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as connection,
    ):
        der = connection.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)
