"""Emptying and deleting a warehouse in the catalog, for DeleteWarehouse.

Every step may be repeated: a drop that someone already did is done, a warehouse
already gone is deleted, and a deactivated (archived) warehouse is activated
first, since a deactivated warehouse's Iceberg API answers nothing but 404. A
warehouse the catalog protects from deletion is refused before anything is
dropped, as the catalog itself would refuse its delete (PROTECTED).
"""

from __future__ import annotations

from collections.abc import Awaitable

from service_runtime.retry import RetryPolicy, retry_async
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError

Contents = dict[tuple[str, ...], list[str]]
#: Lakekeeper's error type for the delete of a protected warehouse.
PROTECTED = "WarehouseProtected"


async def contents(catalog: CatalogClient, name: str, catalog_warehouse_id: str) -> Contents:
    """The warehouse's namespaces (children first) and their tables; empty when it is gone."""
    prefix = await _open_prefix(catalog, name, catalog_warehouse_id)
    if prefix is None:
        return {}
    return {ns: await catalog.tables(prefix, ns) for ns in await catalog.namespaces(prefix)}


async def empty(catalog: CatalogClient, name: str, listed: Contents) -> None:
    """Drops the tables (with their data) and the namespaces listed."""
    if not listed:
        return
    prefix = await catalog.prefix(name)
    for namespace, tables in listed.items():
        for table in tables:
            await _unless_gone(catalog.drop_table(prefix, namespace, table))
        await _unless_gone(catalog.drop_namespace(prefix, namespace))


async def delete(catalog: CatalogClient, catalog_warehouse_id: str, wait_seconds: float) -> None:
    """Deletes the catalog's warehouse, waiting while the catalog still finishes drops."""
    await retry_async(
        lambda: _unless_gone(catalog.delete_warehouse(catalog_warehouse_id)),
        policy=RetryPolicy(
            window_seconds=wait_seconds, first_wait_seconds=0.5, longest_wait_seconds=5.0
        ),
        transient=_still_dropping,
        what="deleting the catalog's warehouse",
    )


def _still_dropping(error: BaseException) -> bool:
    """The catalog refuses to delete a warehouse while it still drops its tables (409), not
    one that is protected."""
    return isinstance(error, CatalogError) and error.status == 409 and error.error_type != PROTECTED


async def _open_prefix(catalog: CatalogClient, name: str, catalog_warehouse_id: str) -> str | None:
    """The warehouse's Iceberg prefix, activating a deactivated warehouse; None when gone.
    The management API says which: Lakekeeper answers getConfig with 404 for both."""
    try:
        found = await catalog.get_warehouse(catalog_warehouse_id)
    except CatalogError as exc:
        if exc.status == 404:
            return None
        raise
    if found.get("protected"):
        raise CatalogError(409, PROTECTED, "Warehouse is protected")
    if found.get("status") == "inactive":
        await catalog.activate_warehouse(catalog_warehouse_id)
    return await catalog.prefix(name)


async def _unless_gone(call: Awaitable[None]) -> None:
    try:
        await call
    except CatalogError as exc:
        if exc.status != 404:
            raise
