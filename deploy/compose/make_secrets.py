"""Writes the secret files of docker-compose.yml's services into one volume, once.

Each service gets a folder of its own (mode 0700, owned by the uid the service runs as) with
only its secrets in files of mode 0600; the public keys go to ``public/``, readable by all.
Keys are generated on the first run and kept. Only this one-shot container sees the values
that come from the environment (the Texera JWT secret and the registry database's URL, from
.env; in the global catalog modes the platform bucket's key, and in global-sql the SQL
catalog's URL, which the result service gets too: see deploy/compose/global*.yml).

The registry's OAuth2 client secret is generated here too, and Keycloak learns it from the
realm it imports: keycloak/texera-lake-realm.json with the secret filled in, written into
Keycloak's import folder (a volume of its own) readable only by Keycloak's uid.

    python make_secrets.py /run/texera-lake /run/keycloak-import
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from service_runtime.internal_tokens import generate_private_key, public_key_text

#: uid each service runs as (docker-compose.yml's `user:` entries; the registry is root, since
#: it runs each computing unit as a system user of its own).
UIDS = {"gateway": 10010, "warehouse-service": 0, "result-service": 10012}
#: uid of the Keycloak image's user.
KEYCLOAK_UID = 1000
REALM_TEMPLATE = Path(__file__).parent / "keycloak" / "texera-lake-realm.json"
#: Client of the registry in the realm, and what stands for its secret in the template.
REGISTRY_CLIENT_ID = "texera-lake-registry"
SECRET_PLACEHOLDER = "generated-by-make-secrets"  # noqa: S105 - stands in for the secret


def _write(folder: Path, name: str, value: str, uid: int, mode: int = 0o600) -> None:
    path = folder / name
    path.unlink(missing_ok=True)
    path.touch(mode=mode)
    path.write_text(value)
    os.chown(path, uid, uid)


def _kept(folder: Path, name: str, make: str) -> str:
    path = folder / name
    return path.read_text() if path.exists() else make


def realm_with_secret(template: str, client_secret: str) -> str:
    """The realm to import: the template with the registry's client secret in place."""
    realm = json.loads(template)
    (client,) = [c for c in realm["clients"] if c["clientId"] == REGISTRY_CLIENT_ID]
    if client["secret"] != SECRET_PLACEHOLDER:
        raise ValueError(f"the realm template's {REGISTRY_CLIENT_ID} secret is not a placeholder")
    client["secret"] = client_secret
    return json.dumps(realm, indent=2)


def platform_files(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The global modes' secret files, by service: the platform bucket's key for the registry
    (global-rest: to create the warehouse in the catalog); with a SQL catalog (global-sql)
    also its URL, and the result service gets both, since it opens the SQL catalog itself."""
    if "PLATFORM_ACCESS_KEY_ID" not in environ:
        return {}
    platform = {
        "platform_access_key_id": environ["PLATFORM_ACCESS_KEY_ID"],
        "platform_secret_access_key": environ["PLATFORM_SECRET_ACCESS_KEY"],
    }
    if "SQL_CATALOG_URL" not in environ:
        return {"warehouse-service": platform}
    sql = {**platform, "sql_catalog_url": environ["SQL_CATALOG_URL"]}
    return {"warehouse-service": sql, "result-service": sql}


def main(root: Path, keycloak_import: Path) -> None:
    folders = {service: root / service for service in UIDS}
    for service, folder in folders.items():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(folder, UIDS[service], UIDS[service])
    gateway_key = _kept(folders["gateway"], "signing_key", generate_private_key())
    registry_key = _kept(folders["warehouse-service"], "signing_key", generate_private_key())
    client_secret = _kept(
        folders["warehouse-service"], "catalog_client_secret", secrets.token_urlsafe(32)
    )
    files = {
        "gateway": {
            "jwt_secret": os.environ["TEXERA_LAKE_JWT_SECRET"],
            "signing_key": gateway_key,
        },
        "warehouse-service": {
            "database_url": os.environ["REGISTRY_DATABASE_URL"],
            "signing_key": registry_key,
            "page_token_key": _kept(
                folders["warehouse-service"], "page_token_key", secrets.token_urlsafe(48)
            ),
            "catalog_client_secret": client_secret,
        },
        "result-service": {
            "page_token_key": _kept(
                folders["result-service"], "page_token_key", secrets.token_urlsafe(48)
            ),
        },
    }
    for service, values in platform_files(os.environ).items():
        files[service] |= values
    for service, values in files.items():
        for name, value in values.items():
            _write(folders[service], name, value, UIDS[service])
    public = root / "public"
    public.mkdir(mode=0o755, exist_ok=True)
    _write(public, "gateway_public_key", public_key_text(gateway_key), 0, 0o644)
    _write(public, "registry_public_key", public_key_text(registry_key), 0, 0o644)
    os.chown(keycloak_import, KEYCLOAK_UID, KEYCLOAK_UID)
    keycloak_import.chmod(0o700)
    realm = realm_with_secret(REALM_TEMPLATE.read_text(), client_secret)
    _write(keycloak_import, REALM_TEMPLATE.name, realm, KEYCLOAK_UID)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
