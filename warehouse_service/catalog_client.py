"""A client of Lakekeeper's management API and, for purges, of the Iceberg REST API.

Timeouts on every call; connection errors, timeouts and 5xx answers are
retried with exponential backoff, then reported as CatalogUnavailable. 4xx
answers are CatalogError with the catalog's status, type and message.
Request bodies carry storage credentials: they are never logged, and no
exception message includes them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any
from urllib.parse import quote

import aiohttp

from texera.lake.v1 import warehouse_pb2

log = logging.getLogger("warehouse_service.catalog")
NAMESPACE_SEPARATOR = "\x1f"
_FLAVORS = {
    warehouse_pb2.S3_FLAVOR_UNSPECIFIED: "aws",
    warehouse_pb2.S3_FLAVOR_AWS: "aws",
    warehouse_pb2.S3_FLAVOR_S3_COMPAT: "s3-compat",
}


class CatalogError(Exception):
    """The catalog refused a request (4xx)."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message


class CatalogUnavailable(Exception):
    """The catalog could not be reached, or kept failing, within the retries."""


def storage_profile_json(storage: warehouse_pb2.S3StorageProfile) -> dict[str, Any]:
    """A Lakekeeper S3 storage profile."""
    return {
        "type": "s3",
        "bucket": storage.bucket,
        "key-prefix": storage.key_prefix.removesuffix("/") or None,
        "region": storage.region,
        "endpoint": storage.endpoint or None,
        "path-style-access": storage.path_style_access,
        "flavor": _FLAVORS[storage.flavor],
        "sts-enabled": storage.sts_enabled,
        "sts-role-arn": storage.sts_role_arn or None,
    }


def storage_credential_json(credentials: warehouse_pb2.S3Credentials) -> dict[str, str]:
    return {
        "type": "s3",
        "credential-type": "access-key",
        "access-key-id": credentials.access_key_id,
        "secret-access-key": credentials.secret_access_key,
    }


class CatalogClient:
    def __init__(
        self,
        management_uri: str,
        catalog_uri: str,
        project_id: str,
        *,
        timeout_seconds: float = 15.0,
        attempts: int = 3,
        backoff_seconds: float = 0.5,
    ) -> None:
        self._management = management_uri.rstrip("/")
        self._catalog = catalog_uri.rstrip("/")
        self._project_id = project_id
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, headers={"x-project-id": self._project_id}
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, url: str, *, json: Any = None, params: Any = None) -> Any:
        """The JSON answer (None when empty); raises CatalogError or CatalogUnavailable."""
        assert self._session is not None, "open() the client first"
        failure = "no attempt"
        for attempt in range(self._attempts):
            if attempt:
                delay = self._backoff * 2 ** (attempt - 1)
                await asyncio.sleep(delay + random.uniform(0, delay / 4))  # noqa: S311 - jitter
            try:
                async with self._session.request(method, url, json=json, params=params) as response:
                    body = await response.json(content_type=None) if await response.read() else None
                    if response.status < 400:
                        return body
                    error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
                    if response.status < 500:
                        raise CatalogError(
                            response.status,
                            str(error.get("type", "")),
                            str(error.get("message", "")),
                        )
                    failure = f"HTTP {response.status} {error.get('type', '')}".strip()
            except (TimeoutError, aiohttp.ClientError) as exc:
                failure = type(exc).__name__
            log.warning(
                "catalog call failed",
                extra={
                    "method": method,
                    "url": url.split("?", maxsplit=1)[0],
                    "attempt": attempt + 1,
                    "failure": failure,
                },
            )
        raise CatalogUnavailable(f"the catalog did not answer ({failure})")

    # Management API -----------------------------------------------------------------

    async def create_warehouse(
        self,
        name: str,
        storage: warehouse_pb2.S3StorageProfile,
        credentials: warehouse_pb2.S3Credentials,
    ) -> dict[str, Any]:
        body = {
            "warehouse-name": name,
            "project-id": self._project_id,
            "storage-profile": storage_profile_json(storage),
            "storage-credential": storage_credential_json(credentials),
        }
        answer: dict[str, Any] = await self._request(
            "POST", f"{self._management}/v1/warehouse", json=body
        )
        return answer

    async def find_warehouse(self, name: str) -> dict[str, Any] | None:
        params = [("warehouseStatus", "active"), ("warehouseStatus", "inactive")]
        answer = await self._request("GET", f"{self._management}/v1/warehouse", params=params)
        return next((w for w in answer["warehouses"] if w["name"] == name), None)

    async def update_credential(
        self, warehouse_id: str, credentials: warehouse_pb2.S3Credentials
    ) -> None:
        await self._request(
            "POST",
            f"{self._management}/v1/warehouse/{warehouse_id}/storage-credential",
            json={"new-storage-credential": storage_credential_json(credentials)},
        )

    async def delete_warehouse(self, warehouse_id: str) -> None:
        await self._request("DELETE", f"{self._management}/v1/warehouse/{warehouse_id}")

    # Iceberg REST API, for purges ---------------------------------------------------

    async def prefix(self, warehouse_name: str) -> str:
        config = await self._request(
            "GET", f"{self._catalog}/v1/config", params={"warehouse": warehouse_name}
        )
        return str(config["overrides"]["prefix"])

    async def namespaces(self, prefix: str, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        """Every namespace under parent, children before their parents."""
        params = {"parent": NAMESPACE_SEPARATOR.join(parent)} if parent else None
        answer = await self._request(
            "GET", f"{self._catalog}/v1/{prefix}/namespaces", params=params
        )
        found: list[tuple[str, ...]] = []
        for namespace in map(tuple, answer["namespaces"]):
            found += await self.namespaces(prefix, namespace)
            found.append(namespace)
        return found

    async def tables(self, prefix: str, namespace: tuple[str, ...]) -> list[str]:
        answer = await self._request("GET", f"{self._namespace_url(prefix, namespace)}/tables")
        return [identifier["name"] for identifier in answer["identifiers"]]

    async def drop_table(self, prefix: str, namespace: tuple[str, ...], table: str) -> None:
        url = f"{self._namespace_url(prefix, namespace)}/tables/{quote(table, safe='')}"
        await self._request("DELETE", url, params={"purgeRequested": "true"})

    async def drop_namespace(self, prefix: str, namespace: tuple[str, ...]) -> None:
        await self._request("DELETE", self._namespace_url(prefix, namespace))

    def _namespace_url(self, prefix: str, namespace: tuple[str, ...]) -> str:
        encoded = quote(NAMESPACE_SEPARATOR.join(namespace), safe="")
        return f"{self._catalog}/v1/{prefix}/namespaces/{encoded}"
