"""What table maintenance may remove: snapshots no reference needs, and files under a table's
location that the table's metadata does not reference.

A file is referenced when the current metadata file, a metadata file in its log, a statistics
file, or a snapshot's manifest list, manifests or their entries (deleted entries included)
name it. An unreferenced file is removed only once it is older than a safety margin: a
commit in flight may have written it and not yet made it part of a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadataUtil


def superseded_snapshots(metadata: dict[str, Any]) -> list[int]:
    """Ids of the snapshots that neither the current snapshot nor any branch or tag is."""
    kept = {ref.get("snapshot-id") for ref in (metadata.get("refs") or {}).values()}
    kept.add(metadata.get("current-snapshot-id"))
    return [
        snapshot["snapshot-id"]
        for snapshot in metadata.get("snapshots") or []
        if snapshot["snapshot-id"] not in kept
    ]


def expiry_commit(metadata: dict[str, Any], snapshot_ids: list[int]) -> dict[str, Any]:
    """A CommitTableRequest that removes snapshot_ids, valid only while the table is the same
    one and its main branch still points where it did."""
    return {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]},
            {
                "type": "assert-ref-snapshot-id",
                "ref": "main",
                "snapshot-id": metadata.get("current-snapshot-id"),
            },
        ],
        "updates": [{"action": "remove-snapshots", "snapshot-ids": snapshot_ids}],
    }


def object_key(location: str) -> str:
    """``bucket/key`` of an ``s3://bucket/key`` location, as file systems list it."""
    parts = urlsplit(location)
    return f"{parts.netloc}{parts.path}" if parts.scheme else location


def referenced_files(metadata: dict[str, Any], metadata_location: str, io: FileIO) -> set[str]:
    """``bucket/key`` of every file the table's metadata references (reads its manifest lists
    and manifests through io)."""
    locations = {metadata_location}
    locations.update(entry["metadata-file"] for entry in metadata.get("metadata-log") or [])
    for key in ("statistics", "partition-statistics"):
        locations.update(item["statistics-path"] for item in metadata.get(key) or [])
    for snapshot in TableMetadataUtil.parse_obj(metadata).snapshots:
        locations.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            locations.add(manifest.manifest_path)
            locations.update(
                entry.data_file.file_path
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=False)
            )
    return {object_key(location) for location in locations}


def orphans(listed: Iterable[tuple[str, float]], referenced: set[str], cutoff: float) -> list[str]:
    """Of listed (``bucket/key``, modification time in epoch seconds), those not referenced
    and last modified before cutoff."""
    return sorted(path for path, modified in listed if path not in referenced and modified < cutoff)
