"""docker-compose.yml's TLS, in each catalog mode, checked as data (no Docker engine runs here).

Every file a container names (in its environment, command, health check or a configuration
file it mounts) is one deploy/compose/make_secrets.py writes, into a volume that container
mounts, readable by the user the container runs as. The mesh's services serve TLS (the
registry and the result service mutual TLS) and call each other over it; every URL in the
file is https (or PostgreSQL with verify-full) to a host that a certificate make_secrets.py
issues names; PostgreSQL, Keycloak, MinIO and Lakekeeper's proxy serve TLS only.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from deploy.compose import make_secrets
from deploy.compose.make_secrets import KEYCLOAK_UID, MINIO_UID, POSTGRES_UID, SERVERS, UIDS
from service_runtime.tls.authority import LOCAL_ADDRESSES, LOCAL_NAMES
from tests.conftest import ROOT
from tests.unit.test_compose import MODE_FILES, _compose, _interpolate

CA = "/run/texera-lake/public/ca.pem"
MESH_SCOPES = {"gateway": "GATEWAY", "warehouse-service": "WAREHOUSE", "result-service": "RESULT"}
#: The uid an image's process reads its files as, where docker-compose.yml sets no `user:`
#: (PostgreSQL's server after the entrypoint drops root); any other image reads as nobody.
IMAGE_UIDS = {
    "postgres": POSTGRES_UID,
    "quay.io/keycloak/keycloak": KEYCLOAK_UID,
    "minio/minio": MINIO_UID,
}
NOBODY = 65534
PATH = re.compile(r"/run/[\w.-]+(?:/[\w.-]+)*")
URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://(?:[^@/\s]*@)?([A-Za-z0-9.-]+)(?::\d+)?(\S*)")
#: The one hop left in plaintext: Lakekeeper's gRPC calls to OpenFGA (see docs/operations.md).
PLAINTEXT = {"LAKEKEEPER__OPENFGA__ENDPOINT"}
#: Every name the certificates make_secrets.py issues are for.
CERTIFIED_NAMES = {
    *UIDS,
    *LOCAL_NAMES,
    *map(str, LOCAL_ADDRESSES),
    *(name for _, names in SERVERS.values() for name in names),
}


Volumes = dict[str, tuple[Path, dict[int, int]]]


@pytest.fixture(scope="module", params=list(MODE_FILES))
def services(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(_compose(request.param)["services"])


@pytest.fixture(scope="module")
def written(services: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Volumes:
    """What lake-secrets writes in the mode (make_secrets.py, run as its command says with its
    environment), by volume: the folder and the owners given (by inode; tests change none)."""
    writer = services["lake-secrets"]
    folder = tmp_path_factory.mktemp("volumes")
    mounts = [entry.split(":")[:2] for entry in writer["volumes"]]
    volumes = {volume: folder / volume for volume, _ in mounts}
    at = {target: volumes[volume] for volume, target in mounts}
    volumes["keycloak-import"].mkdir()
    owners: dict[int, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "chown", lambda path, uid, _: owners.update({os.stat(path).st_ino: uid}))
        for key, value in writer["environment"].items():
            patch.setenv(key, _interpolate(value))
        assert writer["command"][:2] == ["python", "/app/deploy/compose/make_secrets.py"]
        make_secrets.main(*(at[target] for target in writer["command"][2:]))
    return {volume: (path, owners) for volume, path in volumes.items()}


def _user(service: dict[str, Any]) -> int:
    user = str(service.get("user", "")).partition(":")[0]
    if user:
        return 0 if user == "root" else int(user)
    return IMAGE_UIDS.get(service["image"].rpartition(":")[0], NOBODY)


def _listed(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


def _bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """The files of the repository the service mounts, by where it mounts them."""
    mounts = (entry.split(":") for entry in service.get("volumes", []))
    return {target: ROOT / source for source, target, *_ in mounts if source.startswith("./")}


def _texts(service: dict[str, Any]) -> Iterator[str]:
    yield from map(str, (service.get("environment") or {}).values())
    yield from _listed(service.get("command", []))
    yield from _listed(service.get("healthcheck", {}).get("test", []))
    yield from (path.read_text() for path in _bind_mounts(service).values())


def _may(path: Path, uid: int, owners: dict[int, int], owner_bits: int) -> bool:
    """Whether uid has owner_bits on path (as its owner, or as anyone through the same bits
    for others)."""
    mode = path.stat().st_mode
    others = owner_bits >> 6
    return mode & others == others or (
        owners.get(path.stat().st_ino) == uid and mode & owner_bits == owner_bits
    )


def _readable(path: Path, top: Path, uid: int, owners: dict[int, int]) -> bool:
    if uid == 0:
        return True
    folders = [top, *(p for p in path.parents if top in p.parents)]
    wanted = 0o500 if path.is_dir() else 0o400
    return all(_may(f, uid, owners, 0o100) for f in folders) and _may(path, uid, owners, wanted)


def _file_problems(services: dict[str, Any], written: Volumes) -> list[str]:
    problems = []
    for name, service in services.items():
        mounts = {}
        for entry in service.get("volumes", []):
            volume, target, *_ = entry.split(":")
            if volume in written:
                mounts[target] = written[volume]
        for source in _bind_mounts(service).values():
            if not source.is_file():
                problems.append(f"{name}: mounts {source}, which is not in the repository")
        for path in sorted({p for text in _texts(service) for p in PATH.findall(text)}):
            target = next((t for t in mounts if path == t or path.startswith(f"{t}/")), None)
            if target is None:
                problems.append(f"{name}: {path} is in no volume it mounts")
                continue
            top, owners = mounts[target]
            host = top / path.removeprefix(target).lstrip("/")
            if not host.exists():
                problems.append(f"{name}: make_secrets.py writes no {path}")
            elif not _readable(host, top, _user(service), owners):
                problems.append(f"{name}: its user ({_user(service)}) cannot read {path}")
    return problems


def test_every_file_a_container_names_is_written_where_it_mounts_it_for_its_user(
    services: dict[str, Any], written: Volumes
) -> None:
    assert _file_problems(services, written) == []
    # What is caught: a file make_secrets.py does not write, one its reader may not read.
    keycloak = services["keycloak"]
    wrong = {**keycloak["environment"], "KC_HTTPS_CERTIFICATE_FILE": "/run/server-tls/kc.crt"}
    assert _file_problems({"keycloak": {**keycloak, "environment": wrong}}, written)
    assert _file_problems({"keycloak": {**keycloak, "user": "10010"}}, written)


def test_the_mesh_serves_and_calls_over_tls(services: dict[str, Any]) -> None:
    for name, scope in MESH_SCOPES.items():
        environment = services[name]["environment"]
        tls = f"TEXERA_LAKE_{scope}_TLS_"
        certificate = f"/run/texera-lake/{name}/tls_certificate"
        key = f"/run/texera-lake/{name}/tls_key"
        assert environment[f"{tls}CERTIFICATE_FILE"] == certificate, name
        assert environment[f"{tls}KEY_FILE"] == key, name
        assert environment[f"{tls}CA_BUNDLE_FILE"] == CA, name
        mutual = name != "gateway"  # the edge: users' tokens say who calls
        assert environment.get(f"{tls}REQUIRE_CLIENT_CERTIFICATE") == ("true" if mutual else None)
        assert environment.get(f"{tls}CLIENT_CA_FILE") == (CA if mutual else None)
        # The health check speaks TLS, presenting a certificate where one is required.
        probe = services[name]["healthcheck"]["test"]
        assert probe[2:4] == ["-m", "service_runtime.health_probe"]
        assert probe[5:] == ([CA, certificate, key] if mutual else [CA]), name
    registry = services["warehouse-service"]["environment"]
    port = registry["TEXERA_LAKE_WAREHOUSE_UNIT_PORT"]
    assert registry["TEXERA_LAKE_CU_REGISTRY_TARGET"] == f"127.0.0.1:{port}"
    for part in ("CERTIFICATE", "KEY"):
        variable = f"TEXERA_LAKE_WAREHOUSE_UNIT_ISSUER_{part}_FILE"
        assert (
            registry[variable] == f"/run/texera-lake/warehouse-service/unit_issuer_{part.lower()}"
        )
    assert services["gateway"]["environment"]["TEXERA_LAKE_GATEWAY_UNITS_TLS"] == "true"


def test_every_url_is_tls_to_a_host_a_certificate_names(services: dict[str, Any]) -> None:
    registry = services["warehouse-service"]["environment"]
    problems = []
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            for scheme, host, rest in URL.findall(str(value)):
                if key in PLAINTEXT:
                    continue
                if scheme.startswith("postgres"):
                    # The registry's URL is a file; its settings ask for verify-full.
                    verified = "sslmode=verify-full" in rest or (
                        key == "REGISTRY_DATABASE_URL"
                        and registry["TEXERA_LAKE_WAREHOUSE_DATABASE_TLS"] == "verify-full"
                    )
                else:
                    verified = scheme == "https"
                if not verified:
                    problems.append(f"{name}.{key}: {scheme}://{host} is not verified TLS")
                if host not in CERTIFIED_NAMES:
                    problems.append(f"{name}.{key}: no certificate names {host}")
            if key.endswith("_TARGET"):
                host = str(value).rpartition(":")[0]
                if host not in CERTIFIED_NAMES:
                    problems.append(f"{name}.{key}: no certificate names {host}")
    assert problems == []
    for name in ("warehouse-service", "result-service"):
        environment = services[name]["environment"]
        assert environment["TEXERA_LAKE_CATALOG_CA_FILE"] == CA, name
        assert environment["TEXERA_LAKE_STORAGE_CA_FILE"] == CA, name
    assert registry["TEXERA_LAKE_WAREHOUSE_DATABASE_CA_FILE"] == CA


def test_every_postgresql_server_takes_tls_connections_only(services: dict[str, Any]) -> None:
    hba = (ROOT / "deploy/compose/postgres/pg_hba.conf").read_text().splitlines()
    rules = [line.split() for line in hba if line.strip() and not line.startswith("#")]
    assert {rule[0] for rule in rules} == {"local", "hostssl"}  # no plaintext TCP
    servers = [name for name, s in services.items() if s["image"].startswith("postgres:")]
    assert {"catalog-db", "registry-db", "openfga-db"} <= set(servers)
    for name in servers:
        command = services[name]["command"]
        assert command[0] == "postgres"
        options = dict(
            command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "-c"
        )
        assert options == {
            "ssl": "on",
            "ssl_cert_file": f"/run/server-tls/{name}/public.crt",
            "ssl_key_file": f"/run/server-tls/{name}/private.key",
            "hba_file": "/etc/postgresql/pg_hba.conf",
        }
        assert name in SERVERS
        assert _bind_mounts(services[name])["/etc/postgresql/pg_hba.conf"].name == "pg_hba.conf"


def test_keycloak_and_minio_serve_https_only(services: dict[str, Any]) -> None:
    keycloak = services["keycloak"]["environment"]
    assert keycloak["KC_HTTP_ENABLED"] == "false"
    assert keycloak["KC_HTTPS_CERTIFICATE_FILE"] == "/run/server-tls/keycloak/public.crt"
    assert keycloak["KC_HTTPS_CERTIFICATE_KEY_FILE"] == "/run/server-tls/keycloak/private.key"
    assert any(
        port.endswith(f":{keycloak['KC_HTTPS_PORT']}") for port in services["keycloak"]["ports"]
    )
    command = services["minio"]["command"]
    assert command[command.index("--certs-dir") + 1] == "/run/server-tls/minio"
    assert services["minio"]["environment"]["MC_HOST_local"].startswith("https://")


def test_lakekeeper_is_reached_through_its_tls_proxy_alone(services: dict[str, Any]) -> None:
    lakekeeper = services["lakekeeper"]["environment"]
    assert lakekeeper["LAKEKEEPER__BIND_IP"] == "127.0.0.1"  # its plain HTTP: loopback only
    assert lakekeeper["SSL_CERT_FILE"] == "/run/server-tls/ca.pem"  # its own calls trust the CA
    proxy = services["lakekeeper-tls"]
    assert proxy["network_mode"] == "service:lakekeeper"
    conf = _bind_mounts(proxy)["/etc/nginx/nginx.conf"].read_text()
    assert re.search(r"^\s*listen 8181 ssl;$", conf, re.MULTILINE)
    assert f"proxy_pass http://127.0.0.1:{lakekeeper['LAKEKEEPER__LISTEN_PORT']};" in conf
    assert "ssl_certificate /run/server-tls/lakekeeper/public.crt;" in conf
    assert services["lakekeeper"]["ports"] == ["8181:8181"]
    catalog = services["warehouse-service"]["environment"]["TEXERA_LAKE_CATALOG_URI"]
    assert catalog.startswith("https://lakekeeper:8181/")
    for name in ("lakekeeper-bootstrap", "warehouse-service"):
        assert services[name]["depends_on"]["lakekeeper-tls"]["condition"] == "service_healthy"


def test_units_reach_the_catalog_through_the_registrys_gatekeeper_on_loopback(
    services: dict[str, Any], written: Volumes
) -> None:
    """Units run in the registry's container: they reach its catalog gatekeeper on loopback,
    by an address its certificate names, and the gatekeeper's port is not published."""
    service = services["warehouse-service"]
    registry = service["environment"]
    port = registry["TEXERA_LAKE_WAREHOUSE_GATEKEEPER_PORT"]
    uri = urllib.parse.urlsplit(registry["TEXERA_LAKE_WAREHOUSE_GATEKEEPER_URI"])
    assert (uri.scheme, uri.hostname, uri.port) == ("https", "127.0.0.1", int(port))
    assert port not in {registry["TEXERA_LAKE_WAREHOUSE_UNIT_PORT"], "50051"}
    assert not any(str(published).endswith(f":{port}") for published in service.get("ports", []))
    folder, _ = written["lake-secrets"]
    chain = (folder / "warehouse-service" / "tls_certificate").read_bytes()
    names = x509.load_pem_x509_certificate(chain).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert ipaddress.ip_address(uri.hostname) in names.value.get_values_for_type(x509.IPAddress)
    # It serves with the registry's own certificate, which units verify against the CA.
    assert registry["TEXERA_LAKE_WAREHOUSE_TLS_CERTIFICATE_FILE"].endswith("/tls_certificate")


def test_the_reader_clients_secret_is_the_registrys_alone(
    services: dict[str, Any], written: Volumes
) -> None:
    """The reader client's secret is a file of the registry's folder, which only the registry
    names and which no other mesh service's user may read (the one-shot root containers that
    write it and that act as the registry aside)."""
    path = "/run/texera-lake/warehouse-service/catalog_reader_client_secret"
    registry = services["warehouse-service"]["environment"]
    assert registry["TEXERA_LAKE_CATALOG_READER_CLIENT_SECRET_FILE"] == path
    naming = [name for name, service in services.items() if any(path in t for t in _texts(service))]
    assert naming == ["warehouse-service"]
    top, owners = written["lake-secrets"]
    host = top / path.removeprefix("/run/texera-lake/")
    assert host.read_text()
    readers = {
        name
        for name, service in services.items()
        if any(entry.startswith("lake-secrets:") for entry in service.get("volumes", []))
        and _readable(host, top, _user(service), owners)
    }
    assert readers == {"warehouse-service", "lake-secrets", "lakekeeper-bootstrap"}
    for name in ("gateway", "result-service"):
        assert not _readable(host, top, _user(services[name]), owners), name
