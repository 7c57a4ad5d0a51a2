"""Reaching a table's files from the registry: with the credentials the catalog vends for
the table, on the warehouse's registered storage endpoint (checked like any user-given
endpoint), and only once the table's location is known to lie inside the warehouse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service_runtime.endpoint_guard import EndpointGuard
from warehouse_service.catalog.vended import CREDENTIAL_KEYS, credentials_for
from warehouse_service.store.db import Record

#: The vended storage properties used; the endpoint is the registered one.
_STORAGE_KEYS = (
    *CREDENTIAL_KEYS,
    "s3.region",
    "s3.path-style-access",
    "s3.force-virtual-addressing",
)


def warehouse_root(row: Record) -> str:
    """``s3://bucket[/key prefix]`` of the warehouse in row (bucket and key_prefix)."""
    key_prefix = row["key_prefix"].strip("/")
    return f"s3://{row['bucket']}/{key_prefix}" if key_prefix else f"s3://{row['bucket']}"


def storage_properties(
    loaded: dict[str, Any],
    folder: str,
    endpoint: str,
    guard: EndpointGuard,
    storage_io: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """FileIO properties that reach folder of the loaded table (a LoadTableResult), pinned to
    the registered endpoint, with storage_io (the storage CA bundle, catalog_map.trust); None
    when the catalog vends no credentials."""
    vended = credentials_for(loaded, folder)
    if vended is None:
        return None
    properties = {key: vended[key] for key in _STORAGE_KEYS if key in vended}
    properties.update(storage_io or {})
    if endpoint:
        properties["s3.endpoint"] = guard.pinned(endpoint)
    return properties
