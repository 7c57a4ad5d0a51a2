"""The embedded stack's secrets, and how each part of the stack receives its own.

Keys are generated once into the state folder (mode 0700, files 0600) and never printed. A
part gets only the secrets it needs, each in a file of its own under
``secrets/<part>/`` (mode 0600) named by the setting's ``_FILE`` variable: nothing secret is
ever in a process's environment or on its command line.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from lake_client.stack_state import JWT_SECRET_FILE
from service_runtime.config import ENV_PREFIX
from service_runtime.internal_tokens import generate_private_key, public_key_text

CATALOG_KEY_FILE = "catalog-encryption-key"
GATEWAY_KEY_FILE = "gateway-signing-key.pem"
REGISTRY_KEY_FILE = "registry-signing-key.pem"
DATABASE_PASSWORD_FILE = "database-password"  # noqa: S105 - a file name, not a secret
CATALOG_CLIENT_SECRET_FILE = "catalog-client-secret"  # noqa: S105 - a file name
CATALOG_READER_SECRET_FILE = "catalog-reader-secret"  # noqa: S105 - a file name
SQL_CATALOG_PASSWORD_FILE = "sql-catalog-password"  # noqa: S105 - a file name
#: The bearer token of the services' /metrics, for whoever scrapes them (new at each start).
METRICS_TOKEN_FILE = "metrics-token"  # noqa: S105 - a file name
#: The S3 endpoint's administrator key, there while the stack runs (new at each start).


def _kept(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in path, made (mode 0600) on first use."""
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(make())
    return path.read_text().strip()


def _token() -> str:
    return secrets.token_urlsafe(48)


def write_secret(path: Path, value: str) -> Path:
    """Writes value into path, a file only its owner may read or write (0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(value)
    return path


def secret_setting(variable: str, path: Path, value: str) -> dict[str, str]:
    """The ``_FILE`` setting of a secret, written (mode 0600) into path."""
    write_secret(path, value)
    return {f"{variable}_FILE": str(path)}


class StackSecrets:
    """The stack's keys, kept in state_dir."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.chmod(0o700)
        self.folder = state_dir / "secrets"
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(mode=0o700)
        self.jwt_secret = _kept(state_dir / JWT_SECRET_FILE, _token)
        self.catalog_key = _kept(state_dir / CATALOG_KEY_FILE, _token)
        self.database_password = _kept(state_dir / DATABASE_PASSWORD_FILE, _token)
        self.gateway_key = _kept(state_dir / GATEWAY_KEY_FILE, generate_private_key)
        self.registry_key = _kept(state_dir / REGISTRY_KEY_FILE, generate_private_key)
        self.catalog_client_secret = _kept(state_dir / CATALOG_CLIENT_SECRET_FILE, _token)
        #: The registry's second client of the catalog, granted reading alone.
        self.catalog_reader_secret = _kept(state_dir / CATALOG_READER_SECRET_FILE, _token)
        #: The global-sql catalog database's own role (units hold it, never the registry's).
        self.sql_catalog_password = _kept(state_dir / SQL_CATALOG_PASSWORD_FILE, _token)
        # Page-token keys are made anew at each start: pages do not outlive the stack's data.
        self.page_token_keys = {"WAREHOUSE": _token(), "RESULT": _token()}
        self.metrics_token = _token()
        self.metrics_token_file = write_secret(state_dir / METRICS_TOKEN_FILE, self.metrics_token)

    def public_keys(self) -> dict[str, str]:
        """The settings every service gets: the public halves of the two signing keys."""
        return {
            f"{ENV_PREFIX}GATEWAY_PUBLIC_KEY": public_key_text(self.gateway_key),
            f"{ENV_PREFIX}REGISTRY_PUBLIC_KEY": public_key_text(self.registry_key),
        }

    def hand_to(self, part: str, given: Mapping[str, str]) -> dict[str, str]:
        """Writes part's secrets (by setting name) into files of its own; the ``_FILE``
        settings that name them."""
        settings: dict[str, str] = {}
        for variable, value in given.items():
            name = variable.removeprefix(ENV_PREFIX).lower()
            settings |= secret_setting(variable, self.folder / part / name, value)
        return settings
