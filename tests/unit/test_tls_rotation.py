"""A server's certificate rotated on disk: served from the next connection on, without a
restart and without a failed call; files that do not hold together are not served."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from service_runtime.config import ConfigError
from service_runtime.tls.authority import SERVICE_LIFETIME
from service_runtime.tls.files import write_atomically
from service_runtime.tls.server_credentials import CertificateFiles, ReloadingCertificate
from tests.unit.tls_files import (
    SERVER_IDENTITY,
    CertificatePaths,
    MeshFiles,
    served_certificate,
    tls_channel,
    tls_server,
    tls_settings,
    who_am_i,
)


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


async def _call_until(stop: asyncio.Event, channel: grpc.aio.Channel, jwt_secret: str) -> int:
    """Calls over channel until stop is set; how many calls succeeded (raises the first
    failure)."""
    calls = 0
    while not stop.is_set():
        await who_am_i(channel, jwt_secret)
        calls += 1
    return calls


async def _call_on_new_connections_until(
    stop: asyncio.Event, port: int, mesh: MeshFiles, jwt_secret: str
) -> int:
    """Calls, each over a connection of its own (a new TLS handshake), until stop is set."""
    calls = 0
    while not stop.is_set():
        async with tls_channel(port, mesh, fresh=True) as channel:
            await who_am_i(channel, jwt_secret)
        calls += 1
    return calls


async def _served_serial(port: int, mesh: MeshFiles) -> int:
    """The serial of the certificate a new connection is served."""
    served = await asyncio.to_thread(served_certificate, port, mesh.ca_bundle)
    return served.serial_number


async def _served_serial_once_changed(port: int, mesh: MeshFiles, before: int) -> int:
    """The serial served to new connections once it is no longer before (10 s at most)."""
    deadline = time.monotonic() + 10
    while (serial := await _served_serial(port, mesh)) == before:
        assert time.monotonic() < deadline, "the rotated certificate was never served"
        await asyncio.sleep(0.05)
    return serial


async def test_a_rotated_certificate_is_served_to_new_connections_with_no_failed_call(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    paths = mesh.issue("server")
    first = x509.load_pem_x509_certificate(paths.certificate.read_bytes())
    rotated = mesh.authority.issue(SERVER_IDENTITY, lifetime=SERVICE_LIFETIME)
    async with (
        tls_server(tls_settings(paths), jwt_secret) as server,
        tls_channel(server.port, mesh) as kept_open,
    ):
        served_before = await _served_serial(server.port, mesh)
        stop = asyncio.Event()
        callers = asyncio.gather(
            _call_until(stop, kept_open, jwt_secret),
            _call_on_new_connections_until(stop, server.port, mesh, jwt_secret),
        )
        await asyncio.sleep(0.5)
        # As a rotation writes them: the key renamed into place, then the certificate.
        rotated.write(paths.certificate, paths.key)
        served_after = await _served_serial_once_changed(server.port, mesh, served_before)
        await asyncio.sleep(0.5)  # calls go on over the old connection and new ones
        stop.set()
        calls_kept_open, calls_on_new_connections = await callers
    assert served_before == first.serial_number
    assert served_after == rotated.certificate.serial_number
    assert calls_kept_open > 10
    assert calls_on_new_connections > 10


def test_a_certificate_and_a_key_that_do_not_match_are_not_served_until_they_do(
    mesh: MeshFiles,
) -> None:
    paths = mesh.issue("server")
    certificate = ReloadingCertificate(CertificateFiles(str(paths.certificate), str(paths.key)))
    first = certificate.current.certificate.serial_number
    assert certificate.fetch() is None  # nothing changed
    rotated = mesh.authority.issue(SERVER_IDENTITY, lifetime=SERVICE_LIFETIME)

    write_atomically(paths.certificate, rotated.certificate_pem, mode=0o644)  # key not yet
    assert certificate.fetch() is None
    assert certificate.current.certificate.serial_number == first

    write_atomically(paths.key, rotated.private_key_pem, mode=0o600)
    assert certificate.fetch() is not None
    assert certificate.current.certificate.serial_number == rotated.certificate.serial_number
    assert certificate.fetch() is None


def test_a_key_file_others_may_read_is_not_served(mesh: MeshFiles) -> None:
    paths = mesh.issue("server")
    certificate = ReloadingCertificate(CertificateFiles(str(paths.certificate), str(paths.key)))
    mesh.authority.issue(SERVER_IDENTITY, lifetime=SERVICE_LIFETIME).write(
        paths.certificate, paths.key
    )
    paths.key.chmod(0o644)
    assert certificate.fetch() is None
    paths.key.chmod(0o600)
    assert certificate.fetch() is not None


def test_missing_or_broken_files_are_not_served(mesh: MeshFiles) -> None:
    paths = mesh.issue("server")
    certificate = ReloadingCertificate(CertificateFiles(str(paths.certificate), str(paths.key)))
    serial = certificate.current.certificate.serial_number
    paths.key.unlink()
    assert certificate.fetch() is None
    write_atomically(paths.key, b"not a key", mode=0o600)
    assert certificate.fetch() is None
    assert certificate.current.certificate.serial_number == serial


def test_files_that_cannot_be_served_at_start_are_refused(mesh: MeshFiles) -> None:
    server, other = mesh.issue("server"), mesh.issue("other")
    with pytest.raises(ValueError, match="does not match"):
        ReloadingCertificate(CertificateFiles(str(server.certificate), str(other.key)))
    server.key.chmod(0o640 | 0o004)
    with pytest.raises(ValueError, match="chmod 600"):
        ReloadingCertificate(CertificateFiles(str(server.certificate), str(server.key)))
    server.key.chmod(0o600)
    write_atomically(server.certificate, b"not a certificate", mode=0o644)
    with pytest.raises(ValueError, match="does not hold PEM certificates"):
        ReloadingCertificate(CertificateFiles(str(server.certificate), str(server.key)))


async def test_a_service_whose_certificate_cannot_be_served_does_not_start(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    server, other = mesh.issue("server"), mesh.issue("other")
    settings = tls_settings(CertificatePaths(server.certificate, other.key))
    with pytest.raises(ConfigError, match="cannot serve TLS: the private key"):
        async with tls_server(settings, jwt_secret):
            pass
