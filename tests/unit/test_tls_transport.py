"""TLS on a service's port: who the handshake refuses and who it admits, and which identity
the handler sees; on the real RunningServer in this process."""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from service_runtime.tls.authority import MeshAuthority
from service_runtime.tls.identity import service_identity
from tests.unit.tls_files import (
    MeshFiles,
    tls_channel,
    tls_server,
    tls_settings,
    who_am_i,
)

GATEWAY = service_identity("gateway")
RESULT_SERVICE = service_identity("result-service")
DAY = datetime.timedelta(days=1)


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


async def _refused(channel: grpc.aio.Channel, jwt_secret: str) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await who_am_i(channel, jwt_secret)
    return refused.value.code()


async def test_a_tls_port_serves_a_client_that_trusts_the_mesh_ca(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    async with (
        tls_server(tls_settings(mesh.issue("server")), jwt_secret) as server,
        tls_channel(server.port, mesh) as channel,
    ):
        # No client certificate: the server knows no identity of its caller.
        assert await who_am_i(channel, jwt_secret) == "(none)"


async def test_a_plaintext_client_is_refused_by_a_tls_port(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    async with (
        tls_server(tls_settings(mesh.issue("server")), jwt_secret) as server,
        grpc.aio.insecure_channel(f"localhost:{server.port}") as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


async def test_a_server_certificate_from_an_unknown_ca_is_refused_by_the_client(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    stranger = MeshAuthority.create(common_name="not the mesh CA")
    server = mesh.issue("server", authority=stranger)
    async with (
        tls_server(tls_settings(server), jwt_secret) as running,
        tls_channel(running.port, mesh) as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    "days_from_now", [pytest.param(-2, id="expired"), pytest.param(1, id="not-yet-valid")]
)
async def test_a_server_certificate_outside_its_validity_is_refused_by_the_client(
    mesh: MeshFiles, jwt_secret: str, days_from_now: int
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    server = mesh.issue("server", valid_from=now + days_from_now * DAY, lifetime=DAY)
    async with (
        tls_server(tls_settings(server), jwt_secret) as running,
        tls_channel(running.port, mesh) as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


async def test_with_client_certificates_required_the_handler_sees_the_callers_identity(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    settings = tls_settings(mesh.issue("server"), client_ca=mesh.ca_bundle)
    async with (
        tls_server(settings, jwt_secret) as server,
        tls_channel(server.port, mesh, mesh.issue("gateway", GATEWAY)) as channel,
    ):
        assert await who_am_i(channel, jwt_secret) == GATEWAY


async def test_with_client_certificates_required_a_client_without_one_is_refused(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    settings = tls_settings(mesh.issue("server"), client_ca=mesh.ca_bundle)
    async with (
        tls_server(settings, jwt_secret) as server,
        tls_channel(server.port, mesh) as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


async def test_with_client_certificates_required_one_from_outside_the_mesh_ca_is_refused(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    stranger = MeshAuthority.create(common_name="not the mesh CA")
    impostor = mesh.issue("impostor", GATEWAY, authority=stranger)
    settings = tls_settings(mesh.issue("server"), client_ca=mesh.ca_bundle)
    async with (
        tls_server(settings, jwt_secret) as server,
        tls_channel(server.port, mesh, impostor) as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


async def test_an_expired_client_certificate_is_refused(mesh: MeshFiles, jwt_secret: str) -> None:
    now = datetime.datetime.now(datetime.UTC)
    expired = mesh.issue("gateway", GATEWAY, valid_from=now - 2 * DAY, lifetime=DAY)
    settings = tls_settings(mesh.issue("server"), client_ca=mesh.ca_bundle)
    async with (
        tls_server(settings, jwt_secret) as server,
        tls_channel(server.port, mesh, expired) as channel,
    ):
        assert await _refused(channel, jwt_secret) == grpc.StatusCode.UNAVAILABLE


async def test_only_the_allowed_peers_may_call_but_any_mesh_peer_may_check_health(
    mesh: MeshFiles, jwt_secret: str
) -> None:
    settings = tls_settings(
        mesh.issue("server"),
        client_ca=mesh.ca_bundle,
        allowed_peers=f"{GATEWAY}, spiffe://texera-lake/unit/*",
    )
    unit = mesh.issue("unit", "spiffe://texera-lake/unit/cu-1")
    async with (
        tls_server(settings, jwt_secret) as server,
        tls_channel(server.port, mesh, mesh.issue("gateway", GATEWAY)) as gateway,
        tls_channel(server.port, mesh, unit) as unit_channel,
        tls_channel(server.port, mesh, mesh.issue("result", RESULT_SERVICE)) as other,
    ):
        assert await who_am_i(gateway, jwt_secret) == GATEWAY
        assert await who_am_i(unit_channel, jwt_secret) == "spiffe://texera-lake/unit/cu-1"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await who_am_i(other, jwt_secret)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert RESULT_SERVICE in (refused.value.details() or "")
        check = other.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        health = await check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
