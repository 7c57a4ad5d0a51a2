"""The catalog's reader client granted reading every warehouse the registry keeps, at start: for
warehouses made before a reader client was configured (creation grants the new ones)."""

from __future__ import annotations

import logging

from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.store import warehouse_records
from warehouse_service.store.db import Database

log = logging.getLogger("warehouse_service.background.reader_grants")


async def grant_existing(db: Database, catalog: CatalogClient) -> None:
    """Grants the reader every warehouse not being deleted; a refusal is logged, and that
    warehouse's readers get no token until the next start."""
    async with db.connection() as connection:
        rows = await warehouse_records.not_being_deleted(connection)
    for row in rows:
        try:
            await catalog.grant_reader(str(row["catalog_warehouse_id"]))
        except (CatalogError, CatalogUnavailable) as exc:
            log.warning(
                "the catalog's reader client was not granted a warehouse",
                extra={"warehouse_id": str(row["warehouse_id"]), "error": str(exc)[:300]},
            )
