"""Settings of the result service (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from service_runtime.config import ServerSettings, setting


@dataclass(frozen=True, repr=False)
class ResultServiceSettings(ServerSettings):
    scope = "RESULT"
    port: int = setting("PORT", 50053, "gRPC port of the result service.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9453, "Metrics port of the result service; 0 turns it off.", scoped=True
    )
