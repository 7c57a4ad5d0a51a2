"""Settings of a computing unit (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from service_runtime.config import ServerSettings, setting


@dataclass(frozen=True, repr=False)
class ComputingUnitSettings(ServerSettings):
    scope = "CU"
    port: int = setting("PORT", 50052, "gRPC port of the computing unit.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9452, "Metrics port of the computing unit; 0 turns it off.", scoped=True
    )
