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
from typing import Any

import asyncpg
from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO

from lake_tables.naming import CONSOLE_LOGS, EXECUTION_ID, RUNTIME_STATS, execution_table
from lake_tables.orphans import expiry_commit, orphans, referenced_files, superseded_snapshots
from lake_tables.uncommitted import UnsafeLocation, checked_location
from service_runtime.endpoint_guard import EndpointGuard, EndpointRefused
from warehouse_service import retention_store
from warehouse_service.catalog_client import CatalogClient, CatalogError, CatalogUnavailable
from warehouse_service.db import Database
from warehouse_service.queue_worker import WorkFailed
from warehouse_service.table_storage import storage_properties, warehouse_root

log = logging.getLogger("warehouse_service.maintenance")


class TableMaintenance:
    def __init__(
        self, db: Database, catalog: CatalogClient, guard: EndpointGuard, *, margin_seconds: float
    ) -> None:
        self._db = db
        self._catalog = catalog
        self._guard = guard
        self._margin = margin_seconds

    async def __call__(self, row: asyncpg.Record) -> None:
        if row["deleted_at"] is not None:
            return
        execution_id = row["execution_id"]
        async with self._db.connection() as connection:
            outputs = await retention_store.output_tables(connection, execution_id)
        try:
            prefix = await self._catalog.prefix(row["catalog_warehouse_name"])
        except CatalogError as exc:
            raise WorkFailed(f"the catalog refused: {exc}") from exc
        except CatalogUnavailable as exc:
            raise WorkFailed(str(exc)) from exc
        for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
            await self._tend(row, prefix, namespace, execution_table(execution_id), expire=True)
        for namespace, name in outputs:
            await self._tend(row, prefix, namespace, name, expire=False)

    async def _tend(
        self, row: asyncpg.Record, prefix: str, namespace: str, name: str, *, expire: bool
    ) -> None:
        try:
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
        except CatalogError as exc:
            if exc.status == 404:  # never created (nothing was logged), or dropped meanwhile
                return
            raise WorkFailed(f"the catalog refused table {name}: {exc}") from exc
        except CatalogUnavailable as exc:
            raise WorkFailed(str(exc)) from exc
        except (UnsafeLocation, EndpointRefused) as exc:
            raise WorkFailed(f"table {name}: {exc}") from exc
        except OSError as exc:
            raise WorkFailed(f"storage refused under table {name}: {exc}") from exc
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
        properties = storage_properties(loaded, location + "/", endpoint, self._guard)
        if properties is None:  # a catalog that vends no credentials: nothing reachable
            return 0
        io = PyArrowFileIO(properties)
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
