"""Settings of a service that reaches warehouses through the registry and the catalog map."""

from __future__ import annotations

from dataclasses import dataclass

from catalog_map.platform import PlatformWarehouseSettings
from catalog_map.trust import OutboundTlsSettings
from service_runtime.config import ServerSettings, setting


@dataclass(frozen=True, repr=False)
class WarehouseClientSettings(ServerSettings, PlatformWarehouseSettings, OutboundTlsSettings):
    registry_target: str = setting(
        "REGISTRY_TARGET", "127.0.0.1:50051", "host:port of the warehouse registry."
    )
    catalog_cache_size: int = setting(
        "CATALOG_CACHE_SIZE", 64, "Catalogs (one per warehouse) kept at most.", scoped=True
    )
    catalog_idle_seconds: float = setting(
        "CATALOG_IDLE_SECONDS", 600.0, "A catalog unused this long is closed.", scoped=True
    )
