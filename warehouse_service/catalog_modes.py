"""The mesh's catalog mode, a setting (TEXERA_LAKE_CATALOG_MODE): per-user warehouses, or one
platform warehouse in the REST catalog or in the SQL catalog. What each mode allows is
warehouse_service.mode_rules'."""

from __future__ import annotations

import enum


class CatalogMode(enum.StrEnum):
    PER_USER = "per-user"
    GLOBAL_REST = "global-rest"
    GLOBAL_SQL = "global-sql"

    @property
    def is_global(self) -> bool:
        return self is not CatalogMode.PER_USER
