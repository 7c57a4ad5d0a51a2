"""Settings of the warehouse registry (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from service_runtime.config import ServerSettings, setting


@dataclass(frozen=True, repr=False)
class WarehouseServiceSettings(ServerSettings):
    scope = "WAREHOUSE"
    port: int = setting("PORT", 50051, "gRPC port of the warehouse registry.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9451, "Metrics port of the warehouse registry; 0 turns it off.", scoped=True
    )
    database_url: str = setting(
        "DATABASE_URL",
        "",
        "PostgreSQL URL of the registry's database (postgresql://user:password@host:port/db). "
        "Required.",
        secret=True,
        scoped=True,
    )
    catalog_uri: str = setting(
        "CATALOG_URI",
        "http://127.0.0.1:8181/catalog",
        "Iceberg REST catalog URI that computing units and readers are told to use.",
    )
    catalog_management_uri: str = setting(
        "CATALOG_MANAGEMENT_URI",
        "http://127.0.0.1:8181/management",
        "Base URI of the catalog's (Lakekeeper's) management API.",
    )
    catalog_project_id: str = setting(
        "CATALOG_PROJECT_ID",
        "00000000-0000-0000-0000-000000000000",
        "Lakekeeper project that holds the warehouses.",
    )
