"""The table calls the cleaner makes, on global-sql's SQL catalog instead of the REST catalog.

The cleaner and the usage meter list, load and purge an execution's tables through the REST
catalog's API; in global-sql there is none, so the same four calls go to
pyiceberg's SqlCatalog here, with the platform bucket's key as the storage configuration. A
table or namespace that is not there answers as the REST catalog would: CatalogError 404.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from catalog_map.platform import SqlWarehouse
from lake_tables.pyiceberg_arrow import STORAGE_IO_PROPERTIES
from warehouse_service.catalog.catalog_client import CatalogError

T = TypeVar("T")


class SqlCatalogTables:
    def __init__(self, warehouse: SqlWarehouse) -> None:
        self._warehouse = warehouse
        self._catalogs: dict[str, SqlCatalog] = {}

    def _catalog(self, name: str) -> SqlCatalog:
        if name not in self._catalogs:
            self._catalogs[name] = SqlCatalog(
                name,
                uri=self._warehouse.uri,
                warehouse=self._warehouse.warehouse_location,
                **STORAGE_IO_PROPERTIES,
                **self._warehouse.file_io_properties,
            )
        return self._catalogs[name]

    async def _call(self, call: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(call)
        except (NoSuchNamespaceError, NoSuchTableError) as exc:
            raise CatalogError(404, type(exc).__name__, str(exc)) from exc

    async def prefix(self, warehouse_name: str) -> str:
        """The catalog's name for the warehouse (its REST prefix's counterpart)."""
        return warehouse_name

    async def tables(self, prefix: str, namespace: tuple[str, ...]) -> list[str]:
        identifiers = await self._call(lambda: self._catalog(prefix).list_tables(namespace))
        return [identifier[-1] for identifier in identifiers]

    async def load_table(
        self,
        prefix: str,
        namespace: tuple[str, ...],
        table: str,
        *,
        vended_credentials: bool = True,
    ) -> Any:
        """The table as a REST LoadTableResult reads: its metadata in the spec's JSON form,
        and (with vended_credentials) the storage configuration, here the platform bucket's
        key."""
        loaded = await self._call(lambda: self._catalog(prefix).load_table((*namespace, table)))
        result: dict[str, Any] = {
            "metadata": json.loads(loaded.metadata.model_dump_json(by_alias=True))
        }
        if vended_credentials:
            result["config"] = dict(self._warehouse.file_io_properties)
        return result

    async def drop_table(self, prefix: str, namespace: tuple[str, ...], table: str) -> None:
        await self._call(lambda: self._catalog(prefix).purge_table((*namespace, table)))
