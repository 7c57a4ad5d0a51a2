"""Reaching a table's files from the registry: with the credentials the catalog vends for
the table, on the warehouse's registered storage endpoint (checked like any user-given
endpoint), and only once the table's location is known to lie inside the warehouse."""

from __future__ import annotations

from typing import Any

import asyncpg

from service_runtime.endpoint_guard import EndpointGuard

#: The vended storage properties used; the endpoint is the registered one.
_STORAGE_KEYS = (
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.region",
    "s3.path-style-access",
    "s3.force-virtual-addressing",
)


def warehouse_root(row: asyncpg.Record) -> str:
    """``s3://bucket[/key prefix]`` of the warehouse in row (bucket and key_prefix)."""
    key_prefix = row["key_prefix"].strip("/")
    return f"s3://{row['bucket']}/{key_prefix}" if key_prefix else f"s3://{row['bucket']}"


def credentials_for(loaded: dict[str, Any], folder: str) -> dict[str, str] | None:
    """The vended storage configuration that covers folder: the storage credential with the
    longest matching prefix, else the table's config; None when neither holds a key."""
    covering = [
        credential
        for credential in loaded.get("storage-credentials") or []
        if folder.startswith(str(credential.get("prefix", "")))
    ]
    if covering:
        best = max(covering, key=lambda credential: len(str(credential.get("prefix", ""))))
        config = best.get("config") or {}
    else:
        config = loaded.get("config") or {}
    return {str(k): str(v) for k, v in config.items()} if "s3.access-key-id" in config else None


def storage_properties(
    loaded: dict[str, Any], folder: str, endpoint: str, guard: EndpointGuard
) -> dict[str, str] | None:
    """FileIO properties that reach folder of the loaded table (a LoadTableResult), pinned to
    the registered endpoint; None when the catalog vends no credentials."""
    vended = credentials_for(loaded, folder)
    if vended is None:
        return None
    properties = {key: vended[key] for key in _STORAGE_KEYS if key in vended}
    if endpoint:
        properties["s3.endpoint"] = guard.pinned(endpoint)
    return properties
