"""One pyiceberg SqlCatalog per warehouse, all on one database engine, plus vended credentials.

A warehouse's SqlCatalog does the Iceberg work (atomic commits, conflict
detection, metadata files) with the warehouse's own access key. SqlCatalog
opens an engine per instance; here every instance shares the catalog's
engine, so the number of database connections does not grow with the number
of warehouses.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from cachetools import TLRUCache
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import Engine

from embedded_stack.dev_catalog.crypto import CredentialCipher
from embedded_stack.dev_catalog.model import AccessKeyCredential
from embedded_stack.dev_catalog.storage import (
    VendedCredentials,
    assume_role,
    file_io_endpoint,
    sts_client,
)
from embedded_stack.dev_catalog.store import WarehouseRecord
from lake_tables.pyiceberg_arrow import FILE_IO_PROPERTIES
from lake_tables.pyiceberg_sql import RememberingSqlCatalog
from service_runtime.endpoint_guard import EndpointGuard

if TYPE_CHECKING:
    from mypy_boto3_sts import STSClient


#: Metadata files a warehouse's catalog keeps in memory, the most recently written ones.
REMEMBERED_METADATA_FILES = 256
#: Vended credentials kept for reuse, the most recently used ones (each table has its own).
REMEMBERED_CREDENTIALS = 10_000

VendedKey = tuple[str, int, str, bool]


def _file_io_properties(
    record: WarehouseRecord, credential: AccessKeyCredential, endpoint: str | None
) -> dict[str, str]:
    profile = record.profile
    properties = {
        **FILE_IO_PROPERTIES,
        "warehouse": profile.location,
        "s3.access-key-id": credential.access_key_id,
        "s3.secret-access-key": credential.secret_access_key,
        "s3.region": profile.region,
        "s3.force-virtual-addressing": str(not profile.path_style_access).lower(),
    }
    if endpoint:
        properties["s3.endpoint"] = endpoint
    return properties


class WarehouseCatalogs:
    """Catalogs, STS clients and vended credentials per warehouse, rebuilt when credentials
    rotate."""

    def __init__(
        self,
        engine: Engine,
        cipher: CredentialCipher,
        credential_lifetime_seconds: int,
        guard: EndpointGuard,
    ) -> None:
        self._engine = engine
        self._guard = guard
        self._cipher = cipher
        self.credential_lifetime_seconds = credential_lifetime_seconds
        self._lock = threading.Lock()
        self._catalogs: dict[tuple[str, int], SqlCatalog] = {}
        # Each kept while it may be reused (fresh), so that it does not stay for every table
        # ever vended for.
        self._vended: TLRUCache[VendedKey, VendedCredentials] = TLRUCache(
            REMEMBERED_CREDENTIALS, self._stale_at, timer=time.time
        )
        self._sts: dict[tuple[str, int], STSClient] = {}

    def _stale_at(self, _key: VendedKey, vended: VendedCredentials, _now: float) -> float:
        return vended.fresh_until(self.credential_lifetime_seconds)

    def credential(self, record: WarehouseRecord) -> AccessKeyCredential:
        return AccessKeyCredential.from_record(self._cipher.open(record.sealed_credential))

    def catalog(self, record: WarehouseRecord) -> SqlCatalog:
        key = (record.id, record.credential_version)
        with self._lock:
            catalog = self._catalogs.get(key)
        if catalog is not None:
            return catalog
        endpoint = file_io_endpoint(record.profile, self._guard)  # resolves: not under the lock
        with self._lock:
            catalog = self._catalogs.get(key)
            if catalog is None:
                self._forget(record.id)
                properties = _file_io_properties(record, self.credential(record), endpoint)
                catalog = RememberingSqlCatalog(
                    record.id, self._engine, REMEMBERED_METADATA_FILES, **properties
                )
                self._catalogs[key] = catalog
            return catalog

    def vend(self, record: WarehouseRecord, location: str, *, writable: bool) -> VendedCredentials:
        """Short-lived credentials for location (read-only unless writable), reused while more
        than half their life is left."""
        key = (record.id, record.credential_version, location, writable)
        with self._lock:
            cached = self._vended.get(key)
        if cached is not None:
            return cached
        vended = assume_role(
            self._sts_client(record),
            record.profile,
            location,
            self.credential_lifetime_seconds,
            writable=writable,
        )
        with self._lock:
            self._vended[key] = vended
        return vended

    def _sts_client(self, record: WarehouseRecord) -> STSClient:
        """The warehouse's STS client, made once per credential version."""
        key = (record.id, record.credential_version)
        with self._lock:
            client = self._sts.get(key)
        if client is None:
            client = sts_client(record.profile, self.credential(record), self._guard)
            with self._lock:
                client = self._sts.setdefault(key, client)
        return client

    def forget(self, warehouse_id: str) -> None:
        """Drops everything held for a warehouse (rotation, deletion)."""
        with self._lock:
            self._forget(warehouse_id)

    def _forget(self, warehouse_id: str) -> None:
        for catalog_key in [k for k in self._catalogs if k[0] == warehouse_id]:
            del self._catalogs[catalog_key]
        for vended_key in [k for k in self._vended if k[0] == warehouse_id]:
            del self._vended[vended_key]
        for client_key in [k for k in self._sts if k[0] == warehouse_id]:
            del self._sts[client_key]

    def table_config(
        self, record: WarehouseRecord, location: str, delegation: str, *, writable: bool
    ) -> dict[str, Any]:
        """The config and storage-credentials of a LoadTableResult for the requested delegation:
        credentials that may write only for a caller who may write the warehouse."""
        if "vended-credentials" not in delegation or not record.profile.sts_enabled:
            return {"config": {}, "storage-credentials": []}
        config = self.vend(record, location, writable=writable).as_config(record.profile)
        return {"config": config, "storage-credentials": [{"prefix": location, "config": config}]}
