"""The REST backend of CatalogTables: the Iceberg REST API's calls on namespaces and tables.

The calls go through the requests of the client that has them (CatalogClient, with its
timeouts, retries and token); listings follow the catalog's page tokens to the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any
from urllib.parse import quote

from warehouse_service.catalog.tables import CatalogUnavailable, Namespace, children_first

NAMESPACE_SEPARATOR = "\x1f"


class RestCatalogTables(ABC):
    """CatalogTables over the Iceberg REST API at _catalog; a subclass sends the requests."""

    #: The Iceberg REST API's base URI (the one before /v1).
    _catalog: str

    @abstractmethod
    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The JSON answer (None when empty); raises CatalogError or CatalogUnavailable."""

    async def prefix(self, warehouse_name: str) -> str:
        config = await self._request(
            "GET", f"{self._catalog}/v1/config", params={"warehouse": warehouse_name}
        )
        return str(config["overrides"]["prefix"])

    async def namespaces(self, prefix: str, parent: Namespace = ()) -> list[Namespace]:
        """Every namespace under parent, children before their parents."""

        async def children(namespace: Namespace) -> list[Namespace]:
            params = {"parent": NAMESPACE_SEPARATOR.join(namespace)} if namespace else {}
            url = f"{self._catalog}/v1/{prefix}/namespaces"
            return [tuple(child) for child in await self._pages(url, "namespaces", params)]

        return await children_first(children, parent)

    async def tables(self, prefix: str, namespace: Namespace) -> list[str]:
        url = f"{self._namespace_url(prefix, namespace)}/tables"
        return [identifier["name"] for identifier in await self._pages(url, "identifiers", {})]

    async def _pages(self, url: str, key: str, params: dict[str, str]) -> list[Any]:
        """Every item of a listing, following next-page-token until it is null or absent."""
        items: list[Any] = []
        token: str | None = None
        seen: set[str] = set()
        while True:
            page_params = {**params, "pageToken": token} if token else params
            answer = await self._request("GET", url, params=page_params or None)
            items += answer[key]
            token = answer.get("next-page-token")
            if not token:
                return items
            if token in seen:
                raise CatalogUnavailable("the catalog's listing repeats a page token")
            seen.add(token)

    async def load_table(
        self, prefix: str, namespace: Namespace, table: str, *, vended_credentials: bool = True
    ) -> dict[str, Any]:
        """The table's LoadTableResult; with vended_credentials, with storage credentials for
        its location when the catalog vends them."""
        delegation = {"X-Iceberg-Access-Delegation": "vended-credentials"}
        loaded: dict[str, Any] = await self._request(
            "GET",
            self._table_url(prefix, namespace, table),
            headers=delegation if vended_credentials else None,
        )
        return loaded

    async def commit_table(
        self, prefix: str, namespace: Namespace, table: str, commit: dict[str, Any]
    ) -> dict[str, Any]:
        """Commits requirements and updates (a CommitTableRequest); the CommitTableResponse."""
        committed: dict[str, Any] = await self._request(
            "POST", self._table_url(prefix, namespace, table), json=commit
        )
        return committed

    async def drop_table(self, prefix: str, namespace: Namespace, table: str) -> None:
        await self._request(
            "DELETE", self._table_url(prefix, namespace, table), params={"purgeRequested": "true"}
        )

    async def drop_namespace(self, prefix: str, namespace: Namespace) -> None:
        await self._request("DELETE", self._namespace_url(prefix, namespace))

    def _table_url(self, prefix: str, namespace: Namespace, table: str) -> str:
        return f"{self._namespace_url(prefix, namespace)}/tables/{quote(table, safe='')}"

    def _namespace_url(self, prefix: str, namespace: Namespace) -> str:
        encoded = quote(NAMESPACE_SEPARATOR.join(namespace), safe="")
        return f"{self._catalog}/v1/{prefix}/namespaces/{encoded}"
