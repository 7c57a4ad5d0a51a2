"""Reads what ended executions store from their tables' metadata, and publishes the sums.

The registry reads the figures itself, through the catalog, rather than taking a computing
unit's word: for each due execution it loads the result tables the ledger lists and the
execution's runtime_stats and console_logs tables, counts only tables whose properties name
the execution (a unit could list another execution's table), and sums the totals of each
current snapshot (usage_figures). One metadata load per table; no manifest and no bucket is
read. A reading that fails is retried after a doubling backoff. Every replica runs a meter;
each holds what it claims for a while, so two never read one execution at once.
"""

from __future__ import annotations

import asyncio
import logging

from lake_tables.naming import CONSOLE_LOGS, EXECUTION_ID, RESULTS, RUNTIME_STATS, execution_table
from service_runtime.metrics import WAREHOUSE_USAGE
from warehouse_service.background.due_work import Pacing, failure_text
from warehouse_service.catalog.tables import CatalogError, CatalogTables, CatalogUnavailable
from warehouse_service.domain.usage_figures import UnreadableMetadata, Usage, table_usage
from warehouse_service.store import usage_repository
from warehouse_service.store.db import Database, Record

log = logging.getLogger("warehouse_service.background.usage_meter")
_GONE = ("DELETING", "DELETED")


class ReadingFailed(Exception):
    """One reading of an execution's figures failed; it is retried later."""


class UsageMeter:
    def __init__(self, db: Database, catalog: CatalogTables, pacing: Pacing) -> None:
        self._db = db
        self._catalog = catalog
        self._pacing = pacing
        #: The warehouses whose gauges are set.
        self._published: set[str] = set()

    async def measure_and_publish(self) -> int:
        """One round: reads what is due, then publishes the sums; how many it read."""
        taken = await self.measure_due()
        await self.publish()
        return taken

    async def measure_due(self) -> int:
        """Reads the figures of the executions that are due; how many it took."""
        pacing = self._pacing
        rows = await usage_repository.claim_due(self._db, pacing.batch, pacing.hold_seconds)
        for row in rows:
            await self._measure_one(row)
        return len(rows)

    async def publish(self) -> None:
        """Sets the gauges to every warehouse's sums, and drops those of warehouses deleted
        since (never clearing them all: a scrape meanwhile would see none)."""
        rows = await usage_repository.of_every_warehouse(self._db)
        shown = {str(row["warehouse_id"]): row for row in rows}
        for figure, gauge in WAREHOUSE_USAGE.items():
            for warehouse_id, row in shown.items():
                gauge.labels(warehouse_id=warehouse_id).set(row[figure])
            for warehouse_id in self._published - shown.keys():
                gauge.remove(warehouse_id)
        self._published = set(shown)

    async def _measure_one(self, row: Record) -> None:
        execution_id = row["execution_id"]
        try:
            # A warehouse being deleted takes every table with it.
            usage = Usage() if row["warehouse_state"] in _GONE else await self._measure(row)
        except Exception as exc:  # recorded and retried later; the other readings go on
            failure = failure_text(exc, ReadingFailed)
            log.warning(
                "reading an execution's usage failed; retrying later",
                exc_info=not isinstance(exc, ReadingFailed),
                extra={"execution_id": execution_id, "failure": failure},
            )
            await usage_repository.failed(
                self._db,
                execution_id,
                failure,
                self._pacing.interval_seconds,
                self._pacing.max_backoff_seconds,
            )
            return
        await usage_repository.record(self._db, execution_id, usage)

    async def _measure(self, row: Record) -> Usage:
        execution_id = row["execution_id"]
        telemetry = execution_table(execution_id)
        tables = [(RESULTS, name) for name in row["result_tables"]]
        tables += [(RUNTIME_STATS, telemetry), (CONSOLE_LOGS, telemetry)]
        try:
            prefix = await self._catalog.prefix(row["catalog_warehouse_name"])
            found = await asyncio.gather(
                *(self._table(prefix, namespace, name, execution_id) for namespace, name in tables)
            )
            return sum(found, Usage())
        except CatalogError as exc:
            raise ReadingFailed(f"the catalog refused: {exc}") from exc
        except CatalogUnavailable as exc:
            raise ReadingFailed(str(exc)) from exc

    async def _table(self, prefix: str, namespace: str, name: str, execution_id: str) -> Usage:
        """The table's figures if it is the execution's; nothing if it is gone or another's."""
        try:
            loaded = await self._catalog.load_table(
                prefix, (namespace,), name, vended_credentials=False
            )
        except CatalogError as exc:
            if exc.status == 404:  # never created (no telemetry yet), or dropped by a cleanup
                return Usage()
            raise
        metadata = loaded["metadata"]
        if metadata.get("properties", {}).get(EXECUTION_ID) != execution_id:
            return Usage()
        try:
            return table_usage(metadata)
        except UnreadableMetadata as exc:
            raise ReadingFailed(f"table {namespace}.{name}: {exc}") from exc
