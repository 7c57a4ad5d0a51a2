"""Building a pyiceberg catalog for a warehouse binding: the `rest` and `sql` backends.

A REST catalog's requests carry the current token of the warehouse's CatalogToken, and a
refusal (401, 419) tells it so; pyiceberg then tries the request once more, with the token
the holder renewed meanwhile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import AUTH, RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from typing_extensions import override

from catalog_map.catalog_token import CatalogToken, CatalogTokenAuth
from lake_tables.pyiceberg_arrow import FILE_IO_PROPERTIES
from texera.lake.internal.v1 import registry_service_pb2

#: The catalog's answers to a token it does not take (unauthorized, authorization expired).
_TOKEN_REFUSED = frozenset({401, 419})


class _CatalogAdapter(HTTPAdapter):
    """Gives every request a timeout (pyiceberg's REST client sets none), and tells the token
    holder when the catalog refused its token."""

    def __init__(self, timeout_seconds: float, token: CatalogToken) -> None:
        super().__init__()
        self._timeout = timeout_seconds
        self._token = token

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
        response = super().send(request, stream, timeout or self._timeout, verify, cert, proxies)
        if response.status_code in _TOKEN_REFUSED:
            self._token.refused(request.headers.get("Authorization", ""))
        return response


@dataclass(frozen=True)
class SqlWarehouse:
    """The deployment's single global warehouse on a SQL catalog (the `sql` backend)."""

    uri: str = field(repr=False)
    warehouse_location: str
    file_io_properties: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class CatalogFactory:
    """Builds catalogs; blocking (the REST client fetches its config over HTTP)."""

    request_timeout_seconds: float = 30.0
    sql_warehouse: SqlWarehouse | None = None

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
            return SqlCatalog(
                binding.catalog_warehouse,
                uri=self.sql_warehouse.uri,
                warehouse=self.sql_warehouse.warehouse_location,
                **FILE_IO_PROPERTIES,
                **self.sql_warehouse.file_io_properties,
            )
        properties: dict[str, Any] = dict(FILE_IO_PROPERTIES)
        if binding.project_id:
            properties["header.x-project-id"] = binding.project_id
        properties[AUTH] = {
            "type": "custom",
            "impl": f"{CatalogTokenAuth.__module__}.{CatalogTokenAuth.__qualname__}",
            "custom": {"token": token},
        }
        catalog = RestCatalog(
            binding.warehouse_id,
            uri=binding.catalog_uri,
            warehouse=binding.catalog_warehouse,
            **properties,
        )
        adapter = _CatalogAdapter(self.request_timeout_seconds, token)
        for prefix in ("http://", "https://"):
            catalog._session.mount(prefix, adapter)
        return catalog


def catalog_token(catalog: Catalog) -> CatalogToken | None:
    """The token holder a REST catalog built here authorizes its requests with."""
    auth = catalog.properties.get(AUTH)
    holder = auth.get("custom", {}).get("token") if isinstance(auth, dict) else None
    return holder if isinstance(holder, CatalogToken) else None
