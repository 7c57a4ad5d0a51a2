"""Writes the secret files of docker-compose.yml's services into one volume, once.

Each service gets a folder of its own (mode 0700, owned by the uid the service runs as) with
only its secrets in files of mode 0600; the public keys go to ``public/``, readable by all.
Keys are generated on the first run and kept. Only this one-shot container sees the values
that come from the environment (the Texera JWT secret and the registry database's URL, from
.env).

    python make_secrets.py /run/texera-lake
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from service_runtime.internal_tokens import generate_private_key, public_key_text

#: uid each service runs as (docker-compose.yml's `user:` entries; the registry is root, since
#: it runs each computing unit as a system user of its own).
UIDS = {"gateway": 10010, "warehouse-service": 0, "result-service": 10012}


def _write(folder: Path, name: str, value: str, uid: int, mode: int = 0o600) -> None:
    path = folder / name
    path.unlink(missing_ok=True)
    path.touch(mode=mode)
    path.write_text(value)
    os.chown(path, uid, uid)


def _kept(folder: Path, name: str, make: str) -> str:
    path = folder / name
    return path.read_text() if path.exists() else make


def main(root: Path) -> None:
    folders = {service: root / service for service in UIDS}
    for service, folder in folders.items():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(folder, UIDS[service], UIDS[service])
    gateway_key = _kept(folders["gateway"], "signing_key", generate_private_key())
    registry_key = _kept(folders["warehouse-service"], "signing_key", generate_private_key())
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
        },
        "result-service": {
            "page_token_key": _kept(
                folders["result-service"], "page_token_key", secrets.token_urlsafe(48)
            ),
        },
    }
    for service, values in files.items():
        for name, value in values.items():
            _write(folders[service], name, value, UIDS[service])
    public = root / "public"
    public.mkdir(mode=0o755, exist_ok=True)
    _write(public, "gateway_public_key", public_key_text(gateway_key), 0, 0o644)
    _write(public, "registry_public_key", public_key_text(registry_key), 0, 0o644)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
