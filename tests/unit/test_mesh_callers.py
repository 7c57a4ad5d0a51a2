"""Mutual TLS between the mesh's services: outgoing channels present the caller's certificate,
and servers take each call only from the certificates their caller rules name, with a token
that fits the certificate (see service_runtime.tls.caller_rules)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from cu_service.execution_credentials import ExecutionCredentials, IssuedToken
from service_runtime.auth import (
    EXECUTION_ROLE,
    SERVICE_ROLE,
    UNIT_ROLE,
    USER_ROLE,
    AuthenticationError,
    Identity,
    bearer,
    bearer_token,
)
from service_runtime.config import ConfigError, ServerSettings
from service_runtime.context import current_identity
from service_runtime.propagation import service_channel
from service_runtime.server import RunningServer, ServiceBinding, ServiceProcess
from service_runtime.tls.authority import MeshAuthority
from service_runtime.tls.caller_rules import (
    REGISTRY_INTERNAL_SERVICES,
    REGISTRY_RULES,
    UNIT_RULES,
    CallerRules,
    caller_rules,
    token_mismatch,
)
from service_runtime.tls.identity import service_identity, unit_identity
from service_runtime.tls.mesh_client import MeshClientTls, mesh_channel
from service_runtime.tls.peers import peer_identity
from tests.unit.tls_files import CertificatePaths, MeshFiles, tls_settings
from texera.lake.internal.v1 import registry_service_pb2

GATEWAY = service_identity("gateway")
RESULT_SERVICE = service_identity("result-service")
WAREHOUSE_SERVICE = "texera.lake.v1.WarehouseService"
EXECUTION_SERVICE = "texera.lake.v1.ExecutionService"

ALICE = Identity("alice", USER_ROLE, "alice-token")
GATEWAY_TOKEN = Identity("gateway", SERVICE_ROLE, "gateway-token")
UNIT_A = Identity("cu-a", UNIT_ROLE, "unit-a-credential")
EXECUTION = Identity("execution-1", EXECUTION_ROLE, "execution-token")
IDENTITIES = {i.token: i for i in (ALICE, GATEWAY_TOKEN, UNIT_A, EXECUTION)}


class Tokens:
    """Takes the tokens of IDENTITIES as they are, and an on-behalf token as that user
    acting through the caller."""

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        token = bearer_token(authorization)
        if token not in IDENTITIES or (on_behalf is not None and on_behalf not in IDENTITIES):
            raise AuthenticationError("unknown token")
        identity = IDENTITIES[token]
        return replace(IDENTITIES[on_behalf], via=identity) if on_behalf else identity


async def _who(request: bytes, call: Any) -> bytes:
    identity = current_identity()
    return f"{peer_identity(call)}|{identity.user_id}|{identity.role}".encode()


Handler = Callable[[bytes, Any], Any]


def _binding(service: str, handler: Handler = _who) -> ServiceBinding:
    def add(servicer: object, server: grpc.aio.Server) -> None:
        method: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(handler)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(service, {"Who": method})]
        )

    return ServiceBinding(service, None, add)


@asynccontextmanager
async def _server(
    settings: ServerSettings, rules: CallerRules, handlers: Mapping[str, Handler]
) -> AsyncIterator[RunningServer]:
    running = RunningServer(
        ServiceProcess(
            name="test",
            settings=settings,
            authenticator=Tokens(),
            services=[_binding(service, handler) for service, handler in handlers.items()],
            extra_interceptors=caller_rules(settings, rules),
        )
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def _mtls(mesh: MeshFiles, client: CertificatePaths) -> MeshClientTls:
    return MeshClientTls.from_files(
        str(mesh.ca_bundle),
        certificate_chain=str(client.certificate),
        private_key=str(client.key),
    )


async def _call(
    port: int,
    tls: MeshClientTls,
    service: str,
    token: str,
    on_behalf: str | None = None,
) -> str:
    metadata = [bearer(token)]
    if on_behalf is not None:
        metadata.append(("x-texera-on-behalf-of", on_behalf))
    async with mesh_channel(f"localhost:{port}", tls) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{service}/Who"
        )
        return (await call(b"", metadata=metadata, timeout=10)).decode()


async def _refused(*args: Any, **kwargs: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _call(*args, **kwargs)
    return refused.value


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


@pytest.fixture
def registry_settings(mesh: MeshFiles) -> ServerSettings:
    return tls_settings(
        mesh.issue("registry", service_identity("warehouse-service")), client_ca=mesh.ca_bundle
    )


REGISTRY_SERVICE = REGISTRY_INTERNAL_SERVICES[0]
REGISTRY_HANDLERS = {REGISTRY_SERVICE: _who, WAREHOUSE_SERVICE: _who}


async def test_a_forwarded_call_reaches_the_next_service_as_the_gateway_for_the_user(
    mesh: MeshFiles, registry_settings: ServerSettings
) -> None:
    gateway_tls = _mtls(mesh, mesh.issue("gateway", GATEWAY))
    async with _server(registry_settings, REGISTRY_RULES, REGISTRY_HANDLERS) as registry:

        async def forward(request: bytes, call: Any) -> bytes:
            target = f"localhost:{registry.port}"
            async with service_channel(target, tls=gateway_tls) as channel:
                who: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                    f"/{REGISTRY_SERVICE}/Who"
                )
                return await who(b"")

        # The gateway's own port: TLS without client certificates, as at the edge.
        edge = tls_settings(mesh.issue("gateway-server", GATEWAY))
        async with _server(edge, REGISTRY_RULES, {WAREHOUSE_SERVICE: forward}) as gateway:
            client = MeshClientTls.from_files(str(mesh.ca_bundle))
            answer = await _call(gateway.port, client, WAREHOUSE_SERVICE, ALICE.token)
    assert answer == f"{GATEWAY}|alice|{USER_ROLE}"


async def test_only_the_gateway_calls_the_registrys_public_services(
    mesh: MeshFiles, registry_settings: ServerSettings
) -> None:
    result_tls = _mtls(mesh, mesh.issue("result", RESULT_SERVICE))
    gateway_tls = _mtls(mesh, mesh.issue("gateway", GATEWAY))
    async with _server(registry_settings, REGISTRY_RULES, REGISTRY_HANDLERS) as registry:
        refused = await _refused(registry.port, result_tls, WAREHOUSE_SERVICE, ALICE.token)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert RESULT_SERVICE in (refused.details() or "")
        # The result service may ask the registry's internal service for its user ...
        assert await _call(registry.port, result_tls, REGISTRY_SERVICE, ALICE.token) == (
            f"{RESULT_SERVICE}|alice|{USER_ROLE}"
        )
        # ... and the gateway may call both.
        assert await _call(registry.port, gateway_tls, WAREHOUSE_SERVICE, ALICE.token)
        assert await _call(registry.port, gateway_tls, REGISTRY_SERVICE, GATEWAY_TOKEN.token)


async def test_a_unit_takes_users_calls_only_from_the_gateways_certificate(
    mesh: MeshFiles,
) -> None:
    settings = tls_settings(
        mesh.issue("unit-server", unit_identity("cu-a")), client_ca=mesh.ca_bundle
    )
    async with _server(settings, UNIT_RULES, {EXECUTION_SERVICE: _who}) as unit:
        gateway_tls = _mtls(mesh, mesh.issue("gateway", GATEWAY))
        assert await _call(unit.port, gateway_tls, EXECUTION_SERVICE, ALICE.token) == (
            f"{GATEWAY}|alice|{USER_ROLE}"
        )
        for name, identity in (("result", RESULT_SERVICE), ("other-unit", unit_identity("cu-b"))):
            other = _mtls(mesh, mesh.issue(name, identity))
            refused = await _refused(unit.port, other, EXECUTION_SERVICE, ALICE.token)
            assert refused.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_client_certificate_from_outside_the_mesh_ca_is_refused(
    mesh: MeshFiles, registry_settings: ServerSettings
) -> None:
    outsider = mesh.issue("outsider", GATEWAY, authority=MeshAuthority.create())
    async with _server(registry_settings, REGISTRY_RULES, REGISTRY_HANDLERS) as registry:
        refused = await _refused(
            registry.port, _mtls(mesh, outsider), REGISTRY_SERVICE, ALICE.token
        )
    assert refused.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_unit_credential_with_another_units_certificate_is_refused(
    mesh: MeshFiles, registry_settings: ServerSettings
) -> None:
    unit_a = _mtls(mesh, mesh.issue("unit-a", unit_identity("cu-a")))
    unit_b = _mtls(mesh, mesh.issue("unit-b", unit_identity("cu-b")))
    async with _server(registry_settings, REGISTRY_RULES, REGISTRY_HANDLERS) as registry:
        port = registry.port
        assert await _call(port, unit_a, REGISTRY_SERVICE, UNIT_A.token) == (
            f"{unit_identity('cu-a')}|cu-a|{UNIT_ROLE}"
        )
        # Acting for a user, the unit's own certificate still has to come with its credential.
        assert await _call(port, unit_a, REGISTRY_SERVICE, UNIT_A.token, ALICE.token)
        for on_behalf in (None, ALICE.token):
            refused = await _refused(port, unit_b, REGISTRY_SERVICE, UNIT_A.token, on_behalf)
            assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "does not fit the client certificate" in (refused.details() or "")
        # A unit calls none of the registry's public services.
        refused = await _refused(port, unit_a, WAREHOUSE_SERVICE, UNIT_A.token)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("identity", "peer", "fits"),
    [
        (UNIT_A, unit_identity("cu-a"), True),
        (UNIT_A, unit_identity("cu-b"), False),
        (replace(ALICE, via=UNIT_A), unit_identity("cu-a"), True),
        (replace(ALICE, via=UNIT_A), GATEWAY, False),
        (GATEWAY_TOKEN, GATEWAY, True),
        (GATEWAY_TOKEN, RESULT_SERVICE, False),
        (ALICE, GATEWAY, True),
        (ALICE, RESULT_SERVICE, True),
        (ALICE, unit_identity("cu-a"), False),
        (EXECUTION, unit_identity("cu-b"), True),
    ],
)
def test_which_token_fits_which_certificate(identity: Identity, peer: str, fits: bool) -> None:
    assert (token_mismatch(identity, peer) is None) is fits


def test_caller_rules_apply_only_where_client_certificates_are_required(
    mesh: MeshFiles, registry_settings: ServerSettings
) -> None:
    assert caller_rules(registry_settings, REGISTRY_RULES)
    assert caller_rules(tls_settings(mesh.issue("plain-tls")), REGISTRY_RULES) == []
    assert caller_rules(ServerSettings(), REGISTRY_RULES) == []


def test_the_rules_name_the_registrys_internal_services() -> None:
    assert set(REGISTRY_INTERNAL_SERVICES) == {
        service.full_name for service in registry_service_pb2.DESCRIPTOR.services_by_name.values()
    }


def test_outgoing_tls_presents_the_served_certificate_unless_a_client_one_is_set(
    mesh: MeshFiles,
) -> None:
    served, client = mesh.issue("served"), mesh.issue("client")
    settings = replace(tls_settings(served), tls_ca_bundle=str(mesh.ca_bundle))
    tls = MeshClientTls.from_settings(settings)
    assert tls is not None
    assert tls.certificate_chain == served.certificate.read_bytes()
    settings = replace(
        settings, tls_client_certificate=str(client.certificate), tls_client_key=str(client.key)
    )
    tls = MeshClientTls.from_settings(settings)
    assert tls is not None
    assert tls.private_key == client.key.read_bytes()
    assert MeshClientTls.from_settings(ServerSettings()) is None


def test_client_certificate_settings_need_a_ca_bundle_and_both_files(mesh: MeshFiles) -> None:
    client = mesh.issue("client")
    environ = {
        "TEXERA_LAKE_TLS_CLIENT_CERTIFICATE_FILE": str(client.certificate),
        "TEXERA_LAKE_TLS_CLIENT_KEY_FILE": str(client.key),
        "TEXERA_LAKE_PLAINTEXT": "true",  # no certificate to serve with: told to
    }
    with pytest.raises(ConfigError, match="TLS_CA_BUNDLE"):
        ServerSettings.from_env(environ).validate()
    del environ["TEXERA_LAKE_TLS_CLIENT_KEY_FILE"]
    environ["TEXERA_LAKE_TLS_CA_BUNDLE_FILE"] = str(mesh.ca_bundle)
    with pytest.raises(ConfigError, match="TLS_CLIENT_KEY"):
        ServerSettings.from_env(environ).validate()


def test_spark_tasks_never_get_the_units_private_key(mesh: MeshFiles) -> None:
    unit_tls = _mtls(mesh, mesh.issue("unit", unit_identity("cu-a")))

    def issue() -> IssuedToken:
        return IssuedToken("execution-token", 0.0, 1e12)

    with pytest.raises(ValueError, match="no private key"):
        ExecutionCredentials("localhost:1", "execution-1", issue, tls=unit_tls)
    tasks = ExecutionCredentials(
        "localhost:1", "execution-1", issue, tls=unit_tls.server_verification_only()
    )
    vending = tasks.for_table("namespace", "table")
    assert vending.tls is not None
    assert vending.tls.private_key is None
    assert vending.tls.ca_bundle == mesh.ca_bundle.read_bytes()
