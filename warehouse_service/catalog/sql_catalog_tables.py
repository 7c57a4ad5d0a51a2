"""The SQL backend of CatalogTables: global-sql's SQL catalog, through pyiceberg's SqlCatalog.

In global-sql there is no REST catalog, so the registry's calls on a warehouse's tables go to
pyiceberg's SqlCatalog here, with the platform bucket's key as the storage configuration (a
loaded table's config, where the REST catalog would vend credentials). Answers take the REST
API's JSON shapes and failures its statuses and exception types: a namespace or table that is
not there is CatalogError 404, a commit whose requirements fail or a namespace not empty 409,
a commit that is no CommitTableRequest 400.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
)
from pyiceberg.table import CommitTableRequest, CommitTableResponse
from pyiceberg.typedef import IcebergBaseModel

from catalog_map.platform import SqlWarehouse
from lake_tables.pyiceberg_arrow import STORAGE_IO_PROPERTIES
from warehouse_service.catalog.tables import CatalogError, Namespace, children_first

T = TypeVar("T")
#: pyiceberg's refusals, by the status and exception type the REST API answers them with.
_REFUSALS: dict[type[Exception], tuple[int, str]] = {
    NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
    NoSuchTableError: (404, "NoSuchTableException"),
    NamespaceNotEmptyError: (409, "NamespaceNotEmptyException"),
    CommitFailedException: (409, "CommitFailedException"),
}


def _json(model: IcebergBaseModel) -> Any:
    """A pyiceberg model in the REST API's JSON form."""
    return json.loads(model.model_dump_json())


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
        except tuple(_REFUSALS) as exc:
            status, error_type = next(
                answer for refused, answer in _REFUSALS.items() if isinstance(exc, refused)
            )
            raise CatalogError(status, error_type, str(exc)) from exc

    async def prefix(self, warehouse_name: str) -> str:
        """The catalog's name for the warehouse (its REST prefix's counterpart)."""
        return warehouse_name

    async def namespaces(self, prefix: str, parent: Namespace = ()) -> list[Namespace]:
        """Every namespace under parent, children before their parents."""

        async def children(namespace: Namespace) -> list[Namespace]:
            return await self._call(lambda: self._catalog(prefix).list_namespaces(namespace))

        return await children_first(children, parent)

    async def tables(self, prefix: str, namespace: Namespace) -> list[str]:
        identifiers = await self._call(lambda: self._catalog(prefix).list_tables(namespace))
        return [identifier[-1] for identifier in identifiers]

    async def load_table(
        self, prefix: str, namespace: Namespace, table: str, *, vended_credentials: bool = True
    ) -> dict[str, Any]:
        """The table's LoadTableResult; with vended_credentials, its config is the storage
        configuration, here the platform bucket's key."""
        loaded = await self._call(lambda: self._catalog(prefix).load_table((*namespace, table)))
        result: dict[str, Any] = {
            "metadata-location": loaded.metadata_location,
            "metadata": _json(loaded.metadata),
        }
        if vended_credentials:
            result["config"] = dict(self._warehouse.file_io_properties)
        return result

    async def commit_table(
        self, prefix: str, namespace: Namespace, table: str, commit: dict[str, Any]
    ) -> dict[str, Any]:
        """Commits requirements and updates (a CommitTableRequest); the CommitTableResponse."""
        identifier = {"namespace": list(namespace), "name": table}
        try:
            request = CommitTableRequest.model_validate({**commit, "identifier": identifier})
        except ValidationError as exc:
            raise CatalogError(400, "BadRequestException", str(exc).splitlines()[0]) from exc

        def apply() -> CommitTableResponse:
            catalog = self._catalog(prefix)
            loaded = catalog.load_table((*namespace, table))
            return catalog.commit_table(loaded, request.requirements, request.updates)

        committed: dict[str, Any] = _json(await self._call(apply))
        return committed

    async def drop_table(self, prefix: str, namespace: Namespace, table: str) -> None:
        await self._call(lambda: self._catalog(prefix).purge_table((*namespace, table)))

    async def drop_namespace(self, prefix: str, namespace: Namespace) -> None:
        await self._call(lambda: self._catalog(prefix).drop_namespace(namespace))
