"""The maintenance queue's work (see work_queue): an ended execution's tables tidied once.

Due when an execution ends (migration 0006) and claimed once it ended longer ago than the
orphan margin. For its `runtime_stats` and `console_logs` tables, appended many times while
it ran, the snapshots the current one superseded are expired (a commit the catalog applies
only if the table did not move meanwhile); its result tables keep every snapshot, for time
travel. Then, under each of its tables' locations, files no metadata references and older
than the margin are deleted (see lake_tables.orphans), with the table's vended credentials.
A deleted execution needs none of this: its tables are being dropped. Every step may be
repeated after a crash: expired snapshots are not listed again, deleted files not found.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO

from lake_tables.naming import CONSOLE_LOGS, EXECUTION_ID, RUNTIME_STATS, execution_table
from lake_tables.orphans import expiry_commit, orphans, referenced_files, superseded_snapshots
from lake_tables.pyiceberg_arrow import StorageFileIO
from lake_tables.uncommitted import checked_location
from service_runtime.endpoint_guard import EndpointGuard
from warehouse_service.background.table_storage import storage_properties, warehouse_root
from warehouse_service.background.table_work import on_table, warehouse_prefix
from warehouse_service.catalog.tables import CatalogTables
from warehouse_service.store import retention_store
from warehouse_service.store.db import Database, Record

log = logging.getLogger("warehouse_service.background.maintenance")


class TableMaintenance:
    def __init__(
        self,
        db: Database,
        catalog: CatalogTables,
        guard: EndpointGuard,
        *,
        margin_seconds: float,
        storage_io: Mapping[str, str] | None = None,
    ) -> None:
        self._db = db
        self._catalog = catalog
        self._guard = guard
        self._storage_io = storage_io
        self._margin = margin_seconds

    async def __call__(self, row: Record) -> None:
        if row["deleted_at"] is not None:
            return
        execution_id = row["execution_id"]
        async with self._db.connection() as connection:
            outputs = await retention_store.output_tables(connection, execution_id)
        prefix = await warehouse_prefix(self._catalog, row)
        for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
            await self._tend(row, prefix, namespace, execution_table(execution_id), expire=True)
        for namespace, name in outputs:
            await self._tend(row, prefix, namespace, name, expire=False)

    async def _tend(
        self, row: Record, prefix: str, namespace: str, name: str, *, expire: bool
    ) -> None:
        with on_table(name):
            loaded = await self._catalog.load_table(prefix, (namespace,), name)
            metadata = loaded["metadata"]
            if metadata.get("properties", {}).get(EXECUTION_ID) != row["execution_id"]:
                return
            location = checked_location(metadata["location"], warehouse_root(row))
            superseded = superseded_snapshots(metadata) if expire else []
            if superseded:
                committed = await self._catalog.commit_table(
                    prefix, (namespace,), name, expiry_commit(metadata, superseded)
                )
                loaded = {**loaded, **committed}
            removed = await asyncio.to_thread(self._sweep, loaded, location, row["endpoint"])
            log.info(
                "table maintained",
                extra={
                    "execution_id": row["execution_id"],
                    "table": f"{namespace}.{name}",
                    "expired_snapshots": len(superseded),
                    "removed_files": removed,
                },
            )

    def _sweep(self, loaded: dict[str, Any], location: str, endpoint: str) -> int:
        """Deletes the unreferenced files under location older than the margin; how many.
        The metadata is read before the listing, so a file committed in between is young."""
        properties = storage_properties(
            loaded, location + "/", endpoint, self._guard, self._storage_io
        )
        if properties is None:  # a catalog that vends no credentials: nothing reachable
            return 0
        io = StorageFileIO(properties)
        referenced = referenced_files(loaded["metadata"], loaded["metadata-location"], io)
        scheme, netloc, path = PyArrowFileIO.parse_location(location)
        filesystem = io.fs_by_scheme(scheme, netloc)
        listed = [
            (info.path, info.mtime.timestamp())
            for info in filesystem.get_file_info(
                FileSelector(path, recursive=True, allow_not_found=True)
            )
            if info.type == FileType.File and info.mtime is not None
        ]
        removable = orphans(listed, referenced, time.time() - self._margin)
        for orphan in removable:
            filesystem.delete_file(orphan)
        return len(removable)
