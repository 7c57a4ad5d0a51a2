"""Settings of the gateway (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from service_runtime.config import ServerSettings, setting


@dataclass(frozen=True, repr=False)
class GatewaySettings(ServerSettings):
    scope = "GATEWAY"
    port: int = setting(
        "PORT", 50050, "gRPC port of the gateway, the public endpoint.", scoped=True
    )
    metrics_port: int = setting(
        "METRICS_PORT", 9450, "Metrics port of the gateway; 0 turns it off.", scoped=True
    )
