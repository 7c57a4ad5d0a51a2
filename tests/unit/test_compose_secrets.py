"""deploy/compose/make_secrets.py: the registry's client secret, generated once, reaches the
registry as a file of its own and Keycloak in the realm it imports, and nowhere else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deploy.compose import make_secrets
from deploy.compose.make_secrets import KEYCLOAK_UID, REALM_TEMPLATE, REGISTRY_CLIENT_ID


@pytest.fixture
def owners(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Records the owner each path is given (tests do not run as root)."""
    given: dict[str, int] = {}
    monkeypatch.setattr(os, "chown", lambda path, uid, _gid: given.update({str(path): uid}))
    monkeypatch.setenv("TEXERA_LAKE_JWT_SECRET", "j" * 40)
    monkeypatch.setenv("REGISTRY_DATABASE_URL", "postgresql://registry:pw@db/texera_lake")
    return given


def _realm_secret(keycloak_import: Path) -> str:
    realm = json.loads((keycloak_import / REALM_TEMPLATE.name).read_text())
    (client,) = [c for c in realm["clients"] if c["clientId"] == REGISTRY_CLIENT_ID]
    return str(client["secret"])


def test_the_client_secret_is_the_registrys_file_and_the_imported_realms(
    tmp_path: Path, owners: dict[str, int]
) -> None:
    root, keycloak_import = tmp_path / "secrets", tmp_path / "import"
    keycloak_import.mkdir()
    make_secrets.main(root, keycloak_import)
    secret_file = root / "warehouse-service" / "catalog_client_secret"
    secret = secret_file.read_text()
    assert len(secret) >= 32
    assert _realm_secret(keycloak_import) == secret
    realm_file = keycloak_import / REALM_TEMPLATE.name
    assert (realm_file.stat().st_mode & 0o777, owners[str(realm_file)]) == (0o600, KEYCLOAK_UID)
    assert keycloak_import.stat().st_mode & 0o777 == 0o700
    assert owners[str(keycloak_import)] == KEYCLOAK_UID
    assert (secret_file.stat().st_mode & 0o777, owners[str(secret_file)]) == (0o600, 0)
    others = [p for p in root.rglob("*") if p.is_file() and p != secret_file]
    assert all(secret not in p.read_text() for p in others)


def test_a_second_run_keeps_the_secret(tmp_path: Path, owners: dict[str, int]) -> None:
    root, keycloak_import = tmp_path / "secrets", tmp_path / "import"
    keycloak_import.mkdir()
    make_secrets.main(root, keycloak_import)
    first = _realm_secret(keycloak_import)
    make_secrets.main(root, keycloak_import)
    assert _realm_secret(keycloak_import) == first


def test_a_template_with_a_real_secret_is_refused() -> None:
    realm = json.loads(REALM_TEMPLATE.read_text())
    for client in realm["clients"]:
        if client["clientId"] == REGISTRY_CLIENT_ID:
            client["secret"] = "committed-by-mistake"
    with pytest.raises(ValueError, match="not a placeholder"):
        make_secrets.realm_with_secret(json.dumps(realm), "new")
