"""The TLS settings of a service: given as files, and only in combinations that make sense."""

from __future__ import annotations

from pathlib import Path

import pytest

from cu_service.__main__ import held_certificate
from gateway.settings import GatewaySettings
from service_runtime.config import ConfigError, ServerSettings
from service_runtime.tls.mesh_client import MeshClientTls
from tests.unit.tls_files import MeshFiles
from unit_launcher.unit_settings import ComputingUnitSettings

PREFIX = "TEXERA_LAKE_GATEWAY_TLS_"


@pytest.fixture
def mesh(tmp_path: Path) -> MeshFiles:
    return MeshFiles.create(tmp_path)


def _tls_environment(mesh: MeshFiles, **more: str) -> dict[str, str]:
    server = mesh.issue("gateway")
    return {
        f"{PREFIX}CERTIFICATE_FILE": str(server.certificate),
        f"{PREFIX}KEY_FILE": str(server.key),
        **{PREFIX + name: value for name, value in more.items()},
    }


def test_certificate_files_are_settings_holding_their_paths(mesh: MeshFiles) -> None:
    environment = _tls_environment(
        mesh,
        CLIENT_CA_FILE=str(mesh.ca_bundle),
        REQUIRE_CLIENT_CERTIFICATE="true",
        ALLOWED_PEERS="spiffe://texera-lake/unit/*",
    )
    settings = GatewaySettings.from_env(environment)
    assert settings.tls_certificate == environment[f"{PREFIX}CERTIFICATE_FILE"]
    assert settings.tls_key == environment[f"{PREFIX}KEY_FILE"]
    assert settings.tls_client_ca == str(mesh.ca_bundle)
    assert settings.allowed_peers.allows("spiffe://texera-lake/unit/cu-1")
    ServerSettings.validate(settings)
    assert environment[f"{PREFIX}KEY_FILE"] not in repr(settings)


def test_without_a_certificate_a_service_serves_plaintext_only_when_told() -> None:
    settings = GatewaySettings.from_env({})
    assert (settings.tls_certificate, settings.tls_key, settings.tls_client_ca) == ("", "", "")
    with pytest.raises(ConfigError, match="or set TEXERA_LAKE_GATEWAY_PLAINTEXT=true"):
        ServerSettings.validate(settings)
    ServerSettings.validate(GatewaySettings.from_env({"TEXERA_LAKE_GATEWAY_PLAINTEXT": "true"}))


def test_plaintext_beside_a_certificate_is_refused(mesh: MeshFiles) -> None:
    environment = {**_tls_environment(mesh), "TEXERA_LAKE_GATEWAY_PLAINTEXT": "true"}
    with pytest.raises(ConfigError, match="say opposite things"):
        ServerSettings.validate(GatewaySettings.from_env(environment))


def test_a_unit_serves_what_the_registry_launched_it_with() -> None:
    """No certificate, no PLAINTEXT: a unit of a registry that issues no certificates."""
    ComputingUnitSettings(credential="unit-credential").validate()


def test_a_certificate_given_in_the_environment_itself_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"set {PREFIX}CERTIFICATE_FILE"):
        GatewaySettings.from_env({f"{PREFIX}CERTIFICATE": "-----BEGIN CERTIFICATE-----"})


def test_a_key_file_others_may_read_is_refused(mesh: MeshFiles) -> None:
    environment = _tls_environment(mesh)
    Path(environment[f"{PREFIX}KEY_FILE"]).chmod(0o644)
    with pytest.raises(ConfigError, match=f"{PREFIX}KEY_FILE.*chmod 600"):
        GatewaySettings.from_env(environment)


def test_a_missing_certificate_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{PREFIX}CERTIFICATE_FILE"):
        GatewaySettings.from_env({f"{PREFIX}CERTIFICATE_FILE": str(tmp_path / "missing.pem")})


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        ({"REQUIRE_CLIENT_CERTIFICATE": "true"}, "REQUIRE_CLIENT_CERTIFICATE is set but not"),
        ({"ALLOWED_PEERS": "spiffe://texera-lake/gateway"}, "ALLOWED_PEERS is set but not"),
    ],
)
def test_tls_settings_without_a_certificate_are_refused(
    given: dict[str, str], refused: str
) -> None:
    settings = ServerSettings.from_env({f"TEXERA_LAKE_TLS_{k}": v for k, v in given.items()})
    with pytest.raises(ConfigError, match=refused):
        settings.validate()


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        ({"REQUIRE_CLIENT_CERTIFICATE": "true"}, f"{PREFIX}CLIENT_CA_FILE must be set"),
        ({"CLIENT_CA_FILE": "ca"}, "used only with .*REQUIRE_CLIENT_CERTIFICATE=true"),
        ({"ALLOWED_PEERS": "spiffe://texera-lake/gateway"}, "peers are known by"),
        (
            {"REQUIRE_CLIENT_CERTIFICATE": "true", "CLIENT_CA_FILE": "ca", "ALLOWED_PEERS": "x"},
            f"{PREFIX}ALLOWED_PEERS: 'x' is not a SPIFFE ID",
        ),
    ],
)
def test_tls_settings_that_do_not_make_sense_together_are_refused(
    mesh: MeshFiles, given: dict[str, str], refused: str
) -> None:
    if given.get("CLIENT_CA_FILE") == "ca":
        given = {**given, "CLIENT_CA_FILE": str(mesh.ca_bundle)}
    settings = GatewaySettings.from_env(_tls_environment(mesh, **given))
    with pytest.raises(ConfigError, match=refused):
        ServerSettings.validate(settings)


def test_a_certificate_without_its_key_is_refused(mesh: MeshFiles) -> None:
    server = mesh.issue("gateway")
    settings = GatewaySettings.from_env({f"{PREFIX}CERTIFICATE_FILE": str(server.certificate)})
    with pytest.raises(ConfigError, match=f"{PREFIX}KEY_FILE must be set"):
        ServerSettings.validate(settings)


def test_a_unit_holds_its_certificate_in_memory_and_presents_none_of_it_as_a_client(
    mesh: MeshFiles,
) -> None:
    server = mesh.issue("unit")
    settings = ComputingUnitSettings(
        credential="unit-credential",
        tls_certificate=str(server.certificate),
        tls_key=str(server.key),
        tls_client_ca=str(mesh.ca_bundle),
        tls_require_client_certificate=True,
        tls_ca_bundle=str(mesh.ca_bundle),
    )
    settings.validate()
    held = held_certificate(settings)
    assert held is not None
    served = held.certificate.serial_number
    server.key.unlink()  # as the unit removes its secret files before users' code runs
    server.certificate.unlink()
    held.server_credentials(require_client_certificate=True)
    assert held.certificate.serial_number == served
    # Its serving certificate is renewed in memory: a copy for its calls would go stale.
    assert settings.client_certificate == ("", "")
    tls = MeshClientTls.from_settings(settings)
    assert tls is not None
    assert tls.private_key is None
