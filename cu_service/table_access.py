"""What a Spark task needs to read or write a table's files, as plain data.

A catalog's FileIO cannot be pickled, so tasks get the table's metadata (JSON)
and the FileIO's plain properties, which carry the short-lived credentials the
catalog vended. A task that outlives half of those credentials' lifetime asks
the catalog's credentials endpoint (``GET …/tables/{table}/credentials``) for
fresh ones before its next file, as Iceberg's own clients refresh them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

EXPIRES_AT = "s3.session-token-expires-at-ms"
NAMESPACE_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class CredentialEndpoint:
    """Where a task asks for fresh credentials of one table."""

    url: str
    headers: dict[str, str] = field(repr=False)

    def fetch(self, location: str) -> dict[str, str]:
        response = requests.get(
            self.url,
            headers={**self.headers, "X-Iceberg-Access-Delegation": "vended-credentials"},
            timeout=30,
        )
        response.raise_for_status()
        credentials = response.json()["storage-credentials"]
        matching = [c for c in credentials if location.startswith(c["prefix"])]
        if not matching:
            raise PermissionError(f"the catalog vended no credentials for {location}")
        config: dict[str, str] = max(matching, key=lambda c: len(c["prefix"]))["config"]
        return config


@dataclass(frozen=True)
class TableAccess:
    """A table's metadata and FileIO properties; picklable."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)
    refresh: CredentialEndpoint | None = None

    @classmethod
    def of(cls, catalog: Catalog, table: Table) -> TableAccess:
        refresh = None
        if isinstance(catalog, RestCatalog) and EXPIRES_AT in table.io.properties:
            namespace = quote(NAMESPACE_SEPARATOR.join(table.name()[:-1]), safe="")
            prefix = catalog.properties.get("prefix", "")
            name = quote(table.name()[-1], safe="")
            url = f"{catalog.uri.rstrip('/')}/v1/{prefix}/namespaces/{namespace}/tables/{name}/credentials"
            headers = {
                k.removeprefix("header."): v
                for k, v in catalog.properties.items()
                if k.startswith("header.")
            }
            refresh = CredentialEndpoint(url, headers)
        return cls(table.metadata.model_dump_json(), dict(table.io.properties), refresh)

    def metadata(self) -> TableMetadata:
        return TableMetadataUtil.parse_raw(self.metadata_json)


class TaskFileIO:
    """A FileIO for one task, renewed before its credentials run out."""

    def __init__(self, access: TableAccess, location: str) -> None:
        self._access = access
        self._location = location
        self._properties = dict(access.io_properties)
        self._fetched_at = time.time()
        self._io = PyArrowFileIO(self._properties)

    def _stale(self) -> bool:
        expires = self._properties.get(EXPIRES_AT)
        if expires is None or self._access.refresh is None:
            return False
        expires_at = int(expires) / 1000
        return time.time() >= self._fetched_at + (expires_at - self._fetched_at) / 2

    def get(self) -> PyArrowFileIO:
        if self._stale():
            assert self._access.refresh is not None
            self._properties.update(self._access.refresh.fetch(self._location))
            self._fetched_at = time.time()
            self._io = PyArrowFileIO(self._properties)
        return self._io

    def filesystem(self, location: str) -> tuple[Any, str]:
        """The pyarrow filesystem behind location (with current credentials) and the path in it."""
        scheme, netloc, path = PyArrowFileIO.parse_location(location)
        return self.get().fs_by_scheme(scheme, netloc), path
