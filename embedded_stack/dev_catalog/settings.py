"""Settings of the development catalog (see service_runtime.config)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from service_runtime.config import ConfigError, Settings, setting
from service_runtime.endpoint_guard import parse_allowed


@dataclass(frozen=True, repr=False)
class DevCatalogSettings(Settings):
    scope = "DEV_CATALOG"
    host: str = setting("HOST", "127.0.0.1", "Address the servers bind to.")
    port: int = setting("PORT", 8181, "HTTP port of the development catalog.", scoped=True)
    database_url: str = setting(
        "DATABASE_URL",
        "",
        "PostgreSQL URL of the development catalog's own database. Required.",
        secret=True,
        scoped=True,
    )
    encryption_key: str = setting(
        "ENCRYPTION_KEY",
        "",
        "Key that encrypts stored storage credentials (at least 16 characters). Required.",
        secret=True,
        scoped=True,
    )
    credential_lifetime_seconds: int = setting(
        "CREDENTIAL_LIFETIME_SECONDS", 3600, "Lifetime of vended storage credentials.", scoped=True
    )
    allowed_storage_endpoints: str = setting(
        "ALLOWED_STORAGE_ENDPOINTS",
        "",
        "Storage endpoints (http(s)://host:port, comma separated) the catalog may connect to "
        "although they point at a loopback, private or otherwise internal address.",
        scoped=True,
    )
    clients: str = setting(
        "CLIENTS",
        "",
        "The OAuth2 clients of the development catalog, a JSON object of client id to client "
        "secret. Required.",
        secret=True,
        scoped=True,
    )
    token_lifetime_seconds: int = setting(
        "TOKEN_LIFETIME_SECONDS",
        3600,
        "Lifetime of the access tokens the development catalog's token endpoint issues.",
        scoped=True,
    )
    scoped_tokens: bool = setting(
        "SCOPED_TOKENS",
        True,
        "Whether a token exchange narrows the token to the warehouse and access its scope "
        "names. false: it keeps the subject's reach, as Lakekeeper with Keycloak does, so the "
        "registry's every token is the catalog operator's (every warehouse, the management "
        "API).",
        scoped=True,
    )
    page_size: int = setting(
        "PAGE_SIZE",
        100,
        "Most namespaces or tables one listing page holds (a smaller pageSize is honoured).",
        scoped=True,
    )
    record_file: str = setting(
        "RECORD_FILE",
        "",
        "Append every management and Iceberg REST request and its answer to this file (JSON "
        "lines, secrets redacted), for conformance tests; empty records nothing.",
        scoped=True,
    )
    fault_injection: bool = setting(
        "FAULT_INJECTION",
        False,
        "Serve /dev/v1/warehouse/{id}/fault, which makes one warehouse's answers slow or failing.",
        scoped=True,
    )

    def client_secrets(self) -> dict[str, str]:
        """The clients: client id -> secret."""
        try:
            clients = json.loads(self.clients)
        except ValueError:
            clients = None
        if not isinstance(clients, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and len(v) >= 16
            for k, v in clients.items()
        ):
            raise ConfigError(
                "TEXERA_LAKE_DEV_CATALOG_CLIENTS_FILE must hold a JSON object of client ids to "
                "secrets of at least 16 characters"
            )
        return clients

    def validate(self) -> None:
        self.require("database_url")
        self.require("encryption_key")
        self.require("clients")
        self.client_secrets()
        if self.page_size < 1:
            raise ConfigError("TEXERA_LAKE_DEV_CATALOG_PAGE_SIZE must be at least 1")
        if self.token_lifetime_seconds < 1:
            raise ConfigError("TEXERA_LAKE_DEV_CATALOG_TOKEN_LIFETIME_SECONDS must be at least 1")
        if len(self.encryption_key) < 16:
            raise ConfigError(
                "TEXERA_LAKE_DEV_CATALOG_ENCRYPTION_KEY must be at least 16 characters"
            )
        try:
            parse_allowed(self.allowed_storage_endpoints)
        except ValueError as exc:
            raise ConfigError(f"TEXERA_LAKE_DEV_CATALOG_ALLOWED_STORAGE_ENDPOINTS: {exc}") from exc
        if self.credential_lifetime_seconds < 1:
            raise ConfigError(
                "TEXERA_LAKE_DEV_CATALOG_CREDENTIAL_LIFETIME_SECONDS must be at least 1"
            )
