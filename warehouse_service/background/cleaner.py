"""The cleanup queue's work (see work_queue): what failed and cancelled executions leave
behind, and every table of a deleted execution.

The ledger marks an execution's cleanup PENDING in the statement that ends it FAILED or
CANCELLED, whoever ended it (migration 0003), and in the one that deletes it
(DeleteExecution or the retention loop, migration 0006). For each execution it
- finds its tables: in `results`, names that start as the execution's do, whose properties
  name the execution (so also tables a crashed unit created and never reported); for a
  deleted execution also its `runtime_stats` and `console_logs` tables;
- deletes the files under ``<table location>/data/<execution id>/`` (written and maybe never
  committed), reached as table_storage says;
- drops the table with purge through the Iceberg REST catalog (in global-sql: through the SQL
  catalog, see sql_catalog_tables).
Then the queue records DONE. Every step may be repeated: a registry that dies midway leaves
the row PENDING, and the next claim drops what is left. Statistics and console messages of a
failed execution are kept: they explain the failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lake_tables.naming import (
    CONSOLE_LOGS,
    EXECUTION_ID,
    RESULTS,
    RUNTIME_STATS,
    execution_table,
    result_table_prefix,
)
from lake_tables.uncommitted import data_folder, delete_folder
from service_runtime.endpoint_guard import EndpointGuard
from warehouse_service.background.queue_worker import WorkFailed
from warehouse_service.background.table_storage import storage_properties, warehouse_root
from warehouse_service.background.table_work import on_table, warehouse_prefix
from warehouse_service.catalog.tables import CatalogError, CatalogTables, CatalogUnavailable
from warehouse_service.store.db import Record


class ExecutionPurge:
    def __init__(
        self,
        catalog: CatalogTables,
        guard: EndpointGuard,
        storage_io: Mapping[str, str] | None = None,
    ) -> None:
        self._catalog = catalog
        self._guard = guard
        self._storage_io = storage_io

    async def __call__(self, row: Record) -> None:
        execution_id = row["execution_id"]
        prefix = await warehouse_prefix(self._catalog, row)
        for name in await self._listed(prefix, RESULTS):
            if name.startswith(result_table_prefix(execution_id)):
                await self._drop(row, prefix, RESULTS, name)
        if row["deleted_at"] is None:
            return
        for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
            await self._drop(row, prefix, namespace, execution_table(execution_id))

    async def _listed(self, prefix: str, namespace: str) -> list[str]:
        try:
            return await self._catalog.tables(prefix, (namespace,))
        except CatalogError as exc:
            if exc.status == 404:  # no such namespace: nothing was ever written there
                return []
            raise WorkFailed(f"the catalog refused: {exc}") from exc
        except CatalogUnavailable as exc:
            raise WorkFailed(str(exc)) from exc

    async def _drop(self, row: Record, prefix: str, namespace: str, name: str) -> None:
        """Deletes the table's files of this execution and drops it with purge, unless it is
        another execution's table or gone already."""
        execution_id = row["execution_id"]
        with on_table(name):
            loaded = await self._catalog.load_table(prefix, (namespace,), name)
            metadata = loaded["metadata"]
            if metadata.get("properties", {}).get(EXECUTION_ID) != execution_id:
                return
            folder = data_folder(metadata["location"], execution_id, warehouse_root(row))
            await asyncio.to_thread(self._delete_uncommitted, loaded, folder, row["endpoint"])
            await self._catalog.drop_table(prefix, (namespace,), name)

    def _delete_uncommitted(self, loaded: dict[str, Any], folder: str, endpoint: str) -> None:
        """Deletes folder with the table's vended credentials; without any (a catalog that
        vends none) the purge alone removes the table's location."""
        properties = storage_properties(loaded, folder, endpoint, self._guard, self._storage_io)
        if properties is not None:
            delete_folder(properties, folder)
