"""Bootstraps the catalog as the registry: ``python -m warehouse_service.bootstrap_catalog``.

It reads the registry's catalog settings (TEXERA_LAKE_CATALOG_*) and posts Lakekeeper's
bootstrap with the registry's own token, which makes the registry's OAuth2 client the catalog's
operator. A catalog bootstrapped already counts as success, so the command may run at every
start; it exits 1 when the catalog refuses or does not answer, 2 on bad settings.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from service_runtime.config import ConfigError
from service_runtime.logs import configure_logging
from warehouse_service import wiring
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.settings import WarehouseServiceSettings

log = logging.getLogger("warehouse_service.bootstrap_catalog")


async def bootstrap(catalog: CatalogClient) -> bool:
    """Bootstraps the catalog; False if it was bootstrapped already."""
    await catalog.open()
    try:
        return await catalog.bootstrap()
    finally:
        await catalog.close()


def main() -> None:
    configure_logging("bootstrap-catalog")
    try:
        catalog = wiring.catalog_client(WarehouseServiceSettings.from_env())
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        sys.exit(2)
    try:
        done = asyncio.run(bootstrap(catalog))
    except (CatalogError, CatalogUnavailable) as exc:
        log.error("bootstrapping the catalog failed: %s", exc)
        sys.exit(1)
    log.info("catalog bootstrapped" if done else "catalog was bootstrapped already")


if __name__ == "__main__":
    main()
