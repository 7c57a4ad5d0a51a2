"""Settings of the gateway (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from catalog_map.trust import OutboundTlsSettings
from service_runtime.config import ConfigError, ServerSettings, setting


@dataclass(frozen=True, repr=False)
class GatewaySettings(ServerSettings, OutboundTlsSettings):
    scope = "GATEWAY"
    port: int = setting(
        "PORT", 50050, "gRPC port of the gateway, the public endpoint.", scoped=True
    )
    metrics_port: int = setting(
        "METRICS_PORT", 9450, "Metrics port of the gateway; 0 turns it off.", scoped=True
    )
    jwt_secret: str = setting(
        "JWT_SECRET",
        "",
        "HS256 secret that signs users' Texera tokens (at least 32 characters); only the "
        "gateway holds it. Required.",
        secret=True,
    )
    signing_key: str = setting(
        "SIGNING_KEY",
        "",
        "Ed25519 private key (PEM) that signs the internal tokens the gateway issues; its "
        "public half is TEXERA_LAKE_GATEWAY_PUBLIC_KEY. Required.",
        secret=True,
        scoped=True,
    )
    internal_token_seconds: float = setting(
        "INTERNAL_TOKEN_SECONDS",
        300.0,
        "Lifetime of the internal tokens the gateway issues for the users it verified (one "
        "is reused until a third of its life is left). Work that outlives a call, such as an "
        "execution, never depends on it.",
        scoped=True,
    )
    registry_target: str = setting(
        "REGISTRY_TARGET", "127.0.0.1:50051", "host:port of the warehouse registry."
    )
    warehouse_target: str = setting(
        "WAREHOUSE_TARGET",
        "127.0.0.1:50051",
        "host:port of the warehouse service, where WarehouseService calls go.",
        scoped=True,
    )
    result_target: str = setting(
        "RESULT_TARGET",
        "127.0.0.1:50053",
        "host:port of the result service, where ResultService calls go.",
        scoped=True,
    )
    units_tls: bool = setting(
        "UNITS_TLS",
        False,
        "Call computing units over TLS too, with the gateway's CA bundle and client "
        "certificate, checking each unit's certificate by its name: for units the registry "
        "launches with certificates (TEXERA_LAKE_WAREHOUSE_UNIT_ISSUER_CERTIFICATE_FILE).",
        scoped=True,
    )
    iceberg_port: int = setting(
        "ICEBERG_PORT",
        0,
        "Port of the read-only Iceberg REST catalog the gateway serves to users' engines "
        "(pyiceberg, DuckDB, Spark), over TLS with the gateway's certificate when it has one. "
        "Users' Texera tokens authenticate; the gateway reads each warehouse's catalog with "
        "read-only tokens (the catalog's CA: TEXERA_LAKE_CATALOG_CA_FILE). 0 turns it off.",
        scoped=True,
    )
    iceberg_uri: str = setting(
        "ICEBERG_URI",
        "",
        "The Iceberg REST catalog's base URI as users' engines reach it, which "
        "IcebergAccessService hands out. Empty: https:// (http:// without a TLS certificate) "
        "and the gateway's host and ICEBERG_PORT.",
        scoped=True,
    )
    iceberg_token_seconds: float = setting(
        "ICEBERG_TOKEN_SECONDS",
        3600.0,
        "Lifetime of the access tokens the Iceberg REST catalog issues (IcebergAccessService, "
        "its token endpoint), which it alone takes.",
        scoped=True,
    )
    rate_per_second: float = setting(
        "RATE_PER_SECOND",
        100.0,
        "Calls a second each user may make on average; more are RESOURCE_EXHAUSTED.",
        scoped=True,
    )
    rate_burst: int = setting(
        "RATE_BURST", 200, "Calls a user may make at once, above the average rate.", scoped=True
    )
    units_refresh_seconds: float = setting(
        "UNITS_REFRESH_SECONDS",
        1.0,
        "How often the computing units and their load are read from the registry.",
        scoped=True,
    )
    health_interval_seconds: float = setting(
        "HEALTH_INTERVAL_SECONDS",
        2.0,
        "How often the backends' health is checked.",
        scoped=True,
    )

    @property
    def iceberg_catalog_uri(self) -> str:
        """Where users' engines reach the Iceberg REST catalog (see ICEBERG_URI)."""
        if self.iceberg_uri:
            return self.iceberg_uri
        scheme = "https" if self.tls_certificate else "http"
        return f"{scheme}://{self.host}:{self.iceberg_port}"

    def validate(self) -> None:
        super().validate()
        self.require_secret_length("jwt_secret")
        self.require("signing_key")
        if self.units_tls and not self.tls_ca_bundle:
            raise ConfigError(
                f"{self.variable_of('units_tls')} needs {self.variable_of('tls_ca_bundle')}"
            )
        if self.iceberg_token_seconds < 60:
            raise ConfigError(f"{self.variable_of('iceberg_token_seconds')} must be at least 60")
        if self.internal_token_seconds < 10:
            raise ConfigError("TEXERA_LAKE_GATEWAY_INTERNAL_TOKEN_SECONDS must be at least 10")
        if self.rate_per_second <= 0 or self.rate_burst < 1:
            raise ConfigError(
                "TEXERA_LAKE_GATEWAY_RATE_PER_SECOND must be above 0 and "
                "TEXERA_LAKE_GATEWAY_RATE_BURST at least 1"
            )
