"""The catalog's reader client granted reading every warehouse the registry keeps, at start: for
warehouses made before a reader client was configured (creation grants the new ones)."""

from __future__ import annotations

import logging

from warehouse_service.catalog.catalog_client import CatalogClient, CatalogError, CatalogUnavailable
from warehouse_service.store.db import Database

log = logging.getLogger("warehouse_service.background.reader_grants")


async def grant_existing(db: Database, catalog: CatalogClient) -> None:
    """Grants the reader every warehouse not being deleted; a refusal is logged, and that
    warehouse's readers get no token until the next start."""
    async with db.connection() as connection:
        rows = await connection.fetch(
            "SELECT warehouse_id, catalog_warehouse_id FROM warehouses "
            "WHERE state NOT IN ('DELETING', 'DELETED')"
        )
    for row in rows:
        try:
            await catalog.grant_reader(str(row["catalog_warehouse_id"]))
        except (CatalogError, CatalogUnavailable) as exc:
            log.warning(
                "the catalog's reader client was not granted a warehouse",
                extra={"warehouse_id": str(row["warehouse_id"]), "error": str(exc)[:300]},
            )
