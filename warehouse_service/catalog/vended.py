"""Storage credentials a catalog vends with a loaded table (LoadTableResult)."""

from __future__ import annotations

from typing import Any

from catalog_map.credentials import EXPIRES_AT

#: The properties that are the credentials themselves.
CREDENTIAL_KEYS = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")
#: What a renewal hands on: the credentials and when they expire, never where they lead.
RENEWED_KEYS = (*CREDENTIAL_KEYS, EXPIRES_AT)


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
