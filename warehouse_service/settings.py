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
