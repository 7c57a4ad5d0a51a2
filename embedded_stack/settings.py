"""Settings of the embedded stack itself (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from service_runtime.config import Settings, setting


@dataclass(frozen=True, repr=False)
class StackSettings(Settings):
    scope = "STACK"
    state_dir: str = setting(
        "STATE_DIR", ".stack", "Folder of the stack's data, logs and endpoints file.", scoped=True
    )
    host: str = setting("HOST", "127.0.0.1", "Address the servers bind to.")
    postgres_port: int = setting(
        "POSTGRES_PORT", 54329, "Port of the embedded PostgreSQL.", scoped=True
    )
    postgres_dsn: str = setting(
        "POSTGRES_DSN",
        "",
        "Use this PostgreSQL (a postgresql:// URL) instead of starting the embedded one.",
        secret=True,
        scoped=True,
    )
    database: str = setting(
        "DATABASE", "texera_lake", "Database of the warehouse registry.", scoped=True
    )
    s3_port: int = setting("S3_PORT", 9000, "Port of the S3 endpoint.", scoped=True)
    iceberg_port: int = setting(
        "ICEBERG_PORT",
        8182,
        "Port of the gateway's read-only Iceberg REST catalog for users' engines "
        "(TEXERA_LAKE_GATEWAY_ICEBERG_PORT).",
        scoped=True,
    )
    gatekeeper_port: int = setting(
        "GATEKEEPER_PORT",
        8183,
        "Port of the registry's catalog gatekeeper, the catalog as computing units reach it "
        "(TEXERA_LAKE_WAREHOUSE_GATEKEEPER_PORT).",
        scoped=True,
    )
    catalog_database: str = setting(
        "CATALOG_DATABASE",
        "texera_lake_catalog",
        "Database of the development catalog.",
        scoped=True,
    )
    log_level: str = setting("LOG_LEVEL", "INFO", "Log level: DEBUG logs every request, redacted.")
    tls: bool = setting(
        "TLS",
        True,
        "TLS mode: a CA and a certificate per service made under <state dir>/tls at each start; "
        "the gateway serves TLS, the registry, the result service and computing units mutual "
        "TLS, and the services call each other over mutual TLS. false (plaintext throughout) "
        "is for debugging only.",
        scoped=True,
    )
    registry_unit_port: int = setting(
        "REGISTRY_UNIT_PORT",
        50054,
        "The registry's unit port (TEXERA_LAKE_WAREHOUSE_UNIT_PORT), for units and "
        "their Spark tasks, which hold no client certificate (unused in plaintext).",
        scoped=True,
    )
