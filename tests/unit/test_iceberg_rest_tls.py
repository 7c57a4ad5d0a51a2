"""The Iceberg REST endpoint's TLS context follows the gateway's certificate files: a rotated
pair is served to new connections, a pair that does not hold together is not."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from service_runtime.http_server import ReloadingServerContext
from service_runtime.tls.authority import SERVICE_LIFETIME
from service_runtime.tls.files import PRIVATE_MODE, write_atomically
from service_runtime.tls.server_credentials import CertificateFiles
from tests.unit.tls_files import SERVER_IDENTITY, MeshFiles


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


async def _served_serial(context: ssl.SSLContext, ca_bundle: Path) -> int:
    """The serial of the certificate a new connection to a server on context is served."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]

    def handshake() -> int:
        client = ssl.create_default_context(cafile=str(ca_bundle))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname="localhost") as connection,
        ):
            der = connection.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number

    try:
        return await asyncio.to_thread(handshake)
    finally:
        server.close()


async def test_a_rotated_pair_is_served_and_a_half_rotated_one_is_not(mesh: MeshFiles) -> None:
    paths = mesh.issue("gateway")
    files = CertificateFiles(str(paths.certificate), str(paths.key))
    served = ReloadingServerContext(files)
    first = x509.load_pem_x509_certificate(paths.certificate.read_bytes()).serial_number
    assert await _served_serial(served.context, mesh.ca_bundle) == first

    half = mesh.authority.issue(SERVER_IDENTITY, lifetime=SERVICE_LIFETIME)
    write_atomically(paths.key, half.private_key_pem, mode=PRIVATE_MODE)  # its chain not yet
    served.reload_if_changed()
    assert await _served_serial(served.context, mesh.ca_bundle) == first

    rotated = mesh.authority.issue(SERVER_IDENTITY, lifetime=SERVICE_LIFETIME)
    rotated.write(paths.certificate, paths.key)
    served.reload_if_changed()
    assert await _served_serial(served.context, mesh.ca_bundle) == rotated.certificate.serial_number
