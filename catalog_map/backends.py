"""Building a pyiceberg catalog for a warehouse binding: the `rest` and `sql` backends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.catalog import TOKEN, Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from typing_extensions import override

from lake_tables.pyiceberg_arrow import FILE_IO_PROPERTIES
from texera.lake.internal.v1 import registry_service_pb2


class _TimeoutAdapter(HTTPAdapter):
    """Gives every request a timeout; pyiceberg's REST client sets none."""

    def __init__(self, timeout_seconds: float) -> None:
        super().__init__()
        self._timeout = timeout_seconds

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
        return super().send(request, stream, timeout or self._timeout, verify, cert, proxies)


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

    def build(self, binding: registry_service_pb2.CatalogBinding) -> Catalog:
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
        properties = dict(FILE_IO_PROPERTIES)
        if binding.project_id:
            properties["header.x-project-id"] = binding.project_id
        if binding.catalog_token:
            properties[TOKEN] = binding.catalog_token
        catalog = RestCatalog(
            binding.warehouse_id,
            uri=binding.catalog_uri,
            warehouse=binding.catalog_warehouse,
            **properties,
        )
        adapter = _TimeoutAdapter(self.request_timeout_seconds)
        for prefix in ("http://", "https://"):
            catalog._session.mount(prefix, adapter)
        return catalog
