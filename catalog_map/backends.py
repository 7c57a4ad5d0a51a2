"""Building a pyiceberg catalog for a warehouse binding: the `rest` and `sql` backends.

A REST catalog's requests carry the current token of the warehouse's CatalogToken, and a
refusal (401, 419) tells it so; pyiceberg then tries the request once more, with the token
the holder renewed meanwhile. A REST catalog's server is verified as catalog_trust says (the
`ssl` property of pyiceberg's REST client); every catalog's FileIO gets storage_io (the storage
CA bundle, see catalog_map.trust)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import AUTH, CA_BUNDLE, SSL
from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from typing_extensions import override
from urllib3 import PoolManager

from catalog_map.catalog_token import CatalogToken, CatalogTokenAuth
from catalog_map.platform import SqlWarehouse
from lake_tables.pyiceberg_arrow import FILE_IO_PROPERTIES, AdaptedRestCatalog
from service_runtime.outbound_tls import ServerTrust
from texera.lake.internal.v1 import registry_service_pb2

#: The catalog's answers to a token it does not take (unauthorized, authorization expired).
_TOKEN_REFUSED = frozenset({401, 419})


#: Connections to catalogs, kept across the catalog clients built here: a computing unit builds
#: one per execution, and a kept TLS connection spares each a handshake. Every client of a
#: process verifies a catalog's server the same way (see CatalogFactory).
_SHARED_CONNECTIONS = PoolManager(num_pools=16, maxsize=32)


class _CatalogAdapter(HTTPAdapter):
    """Gives every request a timeout (pyiceberg's REST client sets none) and the configured
    server verification (requests lets REQUESTS_CA_BUNDLE override a session's own CA bundle,
    psf/requests#3829), tells the token holder when the catalog refused its token, and sends
    through the process's kept connections."""

    def __init__(self, timeout_seconds: float, token: CatalogToken, verify: bool | str) -> None:
        super().__init__()
        self._timeout = timeout_seconds
        self._token = token
        self._verify = verify

    @override
    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self.poolmanager = _SHARED_CONNECTIONS

    @override
    def close(self) -> None:
        """Leaves the kept connections to the other clients."""

    @override
    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> Response:
        response = super().send(
            request, stream, timeout or self._timeout, self._verify, cert, proxies
        )
        if response.status_code in _TOKEN_REFUSED:
            self._token.refused(request.headers.get("Authorization", ""))
        return response


@dataclass(frozen=True)
class CatalogFactory:
    """Builds catalogs; blocking (the REST client fetches its config over HTTP)."""

    request_timeout_seconds: float = 30.0
    sql_warehouse: SqlWarehouse | None = None
    catalog_trust: ServerTrust = field(default_factory=ServerTrust)
    #: FileIO properties every catalog's tables get (the storage CA bundle).
    storage_io: Mapping[str, str] = field(default_factory=dict)

    def build(
        self, binding: registry_service_pb2.CatalogBinding, token: CatalogToken | None = None
    ) -> Catalog:
        """The warehouse's catalog; its requests carry token's current token (the binding's
        own, never renewed, without one)."""
        token = token or CatalogToken(binding)
        if binding.backend == registry_service_pb2.CATALOG_BACKEND_SQL:
            if self.sql_warehouse is None:
                raise ValueError(
                    "this service has no SQL catalog configured for the global warehouse"
                )
            # Imported here: only a SQL catalog needs SQLAlchemy (see lake_tables.pyiceberg_sql).
            from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

            return SqlCatalog(
                binding.catalog_warehouse,
                uri=self.sql_warehouse.uri,
                warehouse=self.sql_warehouse.warehouse_location,
                **FILE_IO_PROPERTIES,
                **self.storage_io,
                **self.sql_warehouse.file_io_properties,
            )
        properties: dict[str, Any] = {**FILE_IO_PROPERTIES, **self.storage_io}
        if binding.project_id:
            properties["header.x-project-id"] = binding.project_id
        properties[AUTH] = {
            "type": "custom",
            "impl": f"{CatalogTokenAuth.__module__}.{CatalogTokenAuth.__qualname__}",
            "custom": {"token": token},
        }
        verify = self.catalog_trust.requests_verify()
        properties[SSL] = {CA_BUNDLE: verify}
        return AdaptedRestCatalog(
            partial(_CatalogAdapter, self.request_timeout_seconds, token, verify),
            binding.warehouse_id,
            uri=binding.catalog_uri,
            warehouse=binding.catalog_warehouse,
            **properties,
        )


def close_catalog(catalog: Catalog) -> None:
    """Closes a catalog client (best effort: it is dropped either way)."""
    with contextlib.suppress(Exception):
        catalog.close()


def catalog_verify(catalog: Catalog) -> bool | str:
    """How requests to a REST catalog built here verify its server (requests' `verify`)."""
    ssl = catalog.properties.get(SSL)
    verify = ssl.get(CA_BUNDLE, True) if isinstance(ssl, dict) else True
    return verify if isinstance(verify, bool | str) else True


def catalog_token(catalog: Catalog) -> CatalogToken | None:
    """The token holder a REST catalog built here authorizes its requests with."""
    auth = catalog.properties.get(AUTH)
    holder = auth.get("custom", {}).get("token") if isinstance(auth, dict) else None
    return holder if isinstance(holder, CatalogToken) else None
