"""The registry's calls on a warehouse's namespaces and tables, whichever catalog serves them.

CatalogTables is the one interface; its backends are the Iceberg REST API (rest_tables, which
CatalogClient serves) and global-sql's SQL catalog (sql_catalog_tables). Both answer in the
REST API's JSON shapes and fail alike: a refusal is CatalogError with the REST API's status
and exception type (404 for a namespace or table that is not there, 409 for a commit whose
requirements failed), an outage CatalogUnavailable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

Namespace = tuple[str, ...]


class CatalogError(Exception):
    """The catalog refused a request (4xx)."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message


class CatalogUnavailable(Exception):
    """The catalog could not be reached, or kept failing, within the retries."""


class CatalogTables(Protocol):
    """A warehouse's namespaces and tables, addressed by the warehouse's prefix."""

    async def prefix(self, warehouse_name: str) -> str:
        """The prefix that addresses the warehouse in the other calls."""
        ...

    async def namespaces(self, prefix: str, parent: Namespace = ()) -> list[Namespace]:
        """Every namespace under parent, children before their parents."""
        ...

    async def tables(self, prefix: str, namespace: Namespace) -> list[str]:
        """The names of the namespace's tables."""
        ...

    async def load_table(
        self, prefix: str, namespace: Namespace, table: str, *, vended_credentials: bool = True
    ) -> dict[str, Any]:
        """The table's LoadTableResult ({"metadata-location", "metadata", "config"}); with
        vended_credentials, its config holds storage credentials when the catalog has some."""
        ...

    async def commit_table(
        self, prefix: str, namespace: Namespace, table: str, commit: dict[str, Any]
    ) -> dict[str, Any]:
        """Applies a CommitTableRequest's updates if its requirements hold; the
        CommitTableResponse ({"metadata-location", "metadata"})."""
        ...

    async def drop_table(self, prefix: str, namespace: Namespace, table: str) -> None:
        """Drops the table and purges its files."""
        ...

    async def drop_namespace(self, prefix: str, namespace: Namespace) -> None:
        """Drops an empty namespace."""
        ...


async def children_first(
    children: Callable[[Namespace], Awaitable[list[Namespace]]], parent: Namespace = ()
) -> list[Namespace]:
    """Every namespace under parent, children before their parents, from a listing of each
    namespace's children (one level, as the catalogs list them)."""
    found: list[Namespace] = []
    for namespace in await children(parent):
        found += await children_first(children, namespace)
        found.append(namespace)
    return found
