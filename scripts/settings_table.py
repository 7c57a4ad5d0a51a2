"""Prints every setting of the mesh as the Markdown table docs/configuration.md shows."""

from __future__ import annotations

from embedded_stack.dev_catalog.settings import DevCatalogSettings
from embedded_stack.settings import StackSettings
from gateway.settings import GatewaySettings
from result_service.settings import ResultServiceSettings
from service_runtime.config import Settings, markdown_table
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.unit_settings import ComputingUnitSettings
from warehouse_service.settings import WarehouseServiceSettings

ALL_SETTINGS: tuple[type[Settings], ...] = (
    GatewaySettings,
    WarehouseServiceSettings,
    KubernetesLauncherSettings,
    ComputingUnitSettings,
    ResultServiceSettings,
    StackSettings,
    DevCatalogSettings,
)

if __name__ == "__main__":
    print(markdown_table(*ALL_SETTINGS))
