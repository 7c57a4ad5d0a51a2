"""The warehouses' own catalog, as the Iceberg REST endpoint reads it: with the read-only token
of the binding the registry gave for the user's call, asking for credentials vended for the
table loaded. The catalog's prefix of each warehouse is read from its config once per
credential version."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
from cachetools import LRUCache

from texera.lake.internal.v1 import registry_service_pb2

#: Asks the catalog for storage credentials of the table loaded (Iceberg REST's delegation).
DELEGATION = {"X-Iceberg-Access-Delegation": "vended-credentials"}
#: Namespace levels in a path, as Iceberg REST joins them.
UNIT_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class Answer:
    """The catalog's answer, passed on as it came."""

    status: int
    body: bytes
    content_type: str


class CatalogUnreachable(Exception):
    """The catalog did not answer."""


class UpstreamCatalog:
    def __init__(self, ssl_context: ssl.SSLContext | bool, timeout_seconds: float = 30.0) -> None:
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        #: The catalog's prefix by (warehouse id, credential version).
        self._prefixes: LRUCache[tuple[str, int], str] = LRUCache(maxsize=10_000)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _get(
        self,
        binding: registry_service_pb2.CatalogBinding,
        path: str,
        params: dict[str, str],
        headers: dict[str, str],
    ) -> Answer:
        if binding.catalog_token:
            headers = {**headers, "Authorization": f"Bearer {binding.catalog_token}"}
        url = f"{binding.catalog_uri.rstrip('/')}/v1/{path}"
        try:
            async with self._client().get(
                url, params=params, headers=headers, ssl=self._ssl
            ) as response:
                return Answer(
                    response.status,
                    await response.read(),
                    response.headers.get("Content-Type", "application/json"),
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise CatalogUnreachable(type(exc).__name__) from exc

    async def _prefix(self, binding: registry_service_pb2.CatalogBinding) -> str:
        key = (binding.warehouse_id, binding.credential_version)
        if key not in self._prefixes:
            answer = await self._get(
                binding, "config", {"warehouse": binding.catalog_warehouse}, {}
            )
            if answer.status != 200:
                raise CatalogUnreachable(f"the catalog's config answered {answer.status}")
            overrides = json.loads(answer.body).get("overrides", {})
            self._prefixes[key] = str(overrides.get("prefix", ""))
        return self._prefixes[key]

    async def table(
        self,
        binding: registry_service_pb2.CatalogBinding,
        namespace: str,
        table: str,
        *,
        suffix: str = "",
        params: dict[str, str] | None = None,
    ) -> Answer:
        """GET of a table (suffix "" loads it, "/credentials" its storage credentials)."""
        prefix = await self._prefix(binding)
        path = "/".join(
            part
            for part in (
                quote(prefix, safe=""),
                "namespaces",
                quote(namespace, safe=""),
                "tables",
                quote(table, safe="") + suffix,
            )
            if part
        )
        return await self._get(binding, path, params or {}, dict(DELEGATION))
