"""Vended storage credentials that are renewed before they run out.

A REST catalog vends short-lived credentials with a table (Lakekeeper: about
an hour) and pyiceberg never renews them. A reader or writer that outlives
half of their lifetime asks the catalog's credentials endpoint
(``GET …/tables/{table}/credentials``) for fresh ones before its next file, as
Iceberg's own clients do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests
from pyiceberg.catalog import TOKEN, Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

EXPIRES_AT = "s3.session-token-expires-at-ms"
NAMESPACE_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class CredentialEndpoint:
    """Where to ask for fresh credentials of one table; picklable."""

    url: str
    headers: dict[str, str] = field(repr=False)

    @classmethod
    def of(cls, catalog: Catalog, table: Table) -> CredentialEndpoint | None:
        """The table's endpoint; None when its credentials do not expire (or no REST catalog)."""
        if not isinstance(catalog, RestCatalog) or EXPIRES_AT not in table.io.properties:
            return None
        namespace = quote(NAMESPACE_SEPARATOR.join(table.name()[:-1]), safe="")
        prefix = catalog.properties.get("prefix", "")
        name = quote(table.name()[-1], safe="")
        url = f"{catalog.uri.rstrip('/')}/v1/{prefix}/namespaces/{namespace}/tables/{name}/credentials"
        headers = {
            k.removeprefix("header."): v
            for k, v in catalog.properties.items()
            if k.startswith("header.")
        }
        if token := catalog.properties.get(TOKEN):
            headers["Authorization"] = f"Bearer {token}"  # the catalog's token for the warehouse
        return cls(url, headers)

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


class RenewingFileIO:
    """A FileIO for the files under one location, renewed once half its credentials' life
    has passed."""

    def __init__(
        self, io_properties: dict[str, str], refresh: CredentialEndpoint | None, location: str
    ) -> None:
        self._refresh = refresh
        self._location = location
        self._properties = dict(io_properties)
        self._fetched_at = time.time()
        self._io = PyArrowFileIO(self._properties)

    @classmethod
    def of(cls, catalog: Catalog, table: Table) -> RenewingFileIO:
        return cls(
            dict(table.io.properties), CredentialEndpoint.of(catalog, table), table.location()
        )

    def _stale(self) -> bool:
        expires = self._properties.get(EXPIRES_AT)
        if expires is None or self._refresh is None:
            return False
        expires_at = int(expires) / 1000
        return time.time() >= self._fetched_at + (expires_at - self._fetched_at) / 2

    def get(self) -> PyArrowFileIO:
        if self._stale():
            assert self._refresh is not None
            self._properties.update(self._refresh.fetch(self._location))
            self._fetched_at = time.time()
            self._io = PyArrowFileIO(self._properties)
        return self._io

    def filesystem(self, location: str) -> tuple[Any, str]:
        """The pyarrow filesystem behind location (with current credentials) and the path in it."""
        scheme, netloc, path = PyArrowFileIO.parse_location(location)
        return self.get().fs_by_scheme(scheme, netloc), path
