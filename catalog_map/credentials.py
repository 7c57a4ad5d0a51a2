"""Vended storage credentials that are renewed before they run out.

A REST catalog vends short-lived credentials with a table (Lakekeeper: about
an hour) and pyiceberg never renews them. Before each file, a reader or
writer whose credentials have less than a margin left (five minutes, or half
their lifetime if shorter) asks its credential source for fresh ones: a
reader in the result service the catalog's credentials endpoint
(``GET …/tables/{table}/credentials``), as Iceberg's own clients do; a Spark
task of a computing unit, which holds no catalog token, the registry (see
cu_service.execution_credentials). The credentials stay those vended for the
table: never longer lived, never broader.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import requests
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from catalog_map.backends import catalog_token, catalog_verify
from catalog_map.catalog_token import CatalogToken
from lake_tables.pyiceberg_arrow import SmallWritesFileIO

EXPIRES_AT = "s3.session-token-expires-at-ms"
#: Credentials are renewed once less than this is left of them (or half their lifetime).
RENEW_MARGIN_SECONDS = 300.0
NAMESPACE_SEPARATOR = "\x1f"
#: The FileIO properties that reach storage; a catalog's own (its token, its headers) do not.
_STORAGE_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "client.")


def storage_properties(properties: dict[str, str]) -> dict[str, str]:
    """A table FileIO's properties without what reaches the catalog: pyiceberg merges the
    catalog's properties, its token included, into every table's FileIO."""
    return {k: v for k, v in properties.items() if k.startswith(_STORAGE_PREFIXES)}


class CredentialSource(Protocol):
    """Where fresh credentials of one table come from."""

    def fetch(self, location: str) -> dict[str, str]:
        """Fresh storage properties covering location; OSError when none come."""


@dataclass(frozen=True)
class CredentialEndpoint:
    """Where to ask for fresh credentials of one table, and with which catalog token."""

    url: str
    headers: dict[str, str] = field(repr=False)
    token: CatalogToken | None = field(default=None, repr=False)
    #: How the catalog's server is verified (requests' `verify`: a CA bundle, True or False).
    verify: bool | str = True

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
        return cls(url, headers, catalog_token(catalog), catalog_verify(catalog))

    def fetch(self, location: str) -> dict[str, str]:
        headers = {**self.headers, "X-Iceberg-Access-Delegation": "vended-credentials"}
        if self.token is not None and (token := self.token.current()):
            headers["Authorization"] = f"Bearer {token}"  # the catalog's token for the warehouse
        response = requests.get(self.url, headers=headers, timeout=30, verify=self.verify)
        response.raise_for_status()
        credentials = response.json()["storage-credentials"]
        matching = [c for c in credentials if location.startswith(c["prefix"])]
        if not matching:
            raise PermissionError(f"the catalog vended no credentials for {location}")
        config: dict[str, str] = max(matching, key=lambda c: len(c["prefix"]))["config"]
        return config


@dataclass(frozen=True)
class CredentialTerm:
    """When credentials were vended and when they expire (None: never, or cannot be renewed)."""

    vended_at: float
    expires_at: float | None

    @classmethod
    def of(cls, properties: dict[str, str], vended_at: float, renewable: bool) -> CredentialTerm:
        expires = properties.get(EXPIRES_AT)
        return cls(vended_at, int(expires) / 1000 if expires and renewable else None)

    def renewal_due(self) -> bool:
        """Less than the margin is left: RENEW_MARGIN_SECONDS, or half their lifetime if that
        is shorter."""
        if self.expires_at is None:
            return False
        margin = min(RENEW_MARGIN_SECONDS, (self.expires_at - self.vended_at) / 2)
        return self.expires_at - time.time() <= margin


class RenewingFileIO:
    """A FileIO for the files under one location, renewed before each file once less than a
    margin is left of its credentials. vended_at: when the catalog vended io_properties' credentials
    (they may travel a while, to a Spark task, before they are used)."""

    def __init__(
        self,
        io_properties: dict[str, str],
        refresh: CredentialSource | None,
        location: str,
        *,
        vended_at: float | None = None,
    ) -> None:
        self._refresh = refresh
        self._location = location
        self._properties = dict(io_properties)
        self.term = CredentialTerm.of(
            self._properties, time.time() if vended_at is None else vended_at, refresh is not None
        )
        self._io: PyArrowFileIO = SmallWritesFileIO(self._properties)

    @classmethod
    def of(cls, catalog: Catalog, table: Table) -> RenewingFileIO:
        return cls(
            dict(table.io.properties), CredentialEndpoint.of(catalog, table), table.location()
        )

    def get(self) -> PyArrowFileIO:
        if self.term.renewal_due():
            assert self._refresh is not None
            fetched_at = time.time()
            self._properties.update(self._refresh.fetch(self._location))
            self.term = CredentialTerm.of(self._properties, fetched_at, renewable=True)
            self._io = SmallWritesFileIO(self._properties)
        return self._io

    def filesystem(self, location: str) -> tuple[Any, str]:
        """The pyarrow filesystem behind location (with current credentials) and the path in it."""
        scheme, netloc, path = PyArrowFileIO.parse_location(location)
        return self.get().fs_by_scheme(scheme, netloc), path
