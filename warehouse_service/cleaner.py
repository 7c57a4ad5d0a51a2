"""The cleanup of failed and cancelled executions, worked from the ledger until done.

The ledger marks an execution's cleanup PENDING in the statement that ends it
FAILED or CANCELLED, whoever ended it: its unit, the unit's restart, the lease
sweep (migration 0003). Every replica of the registry runs a cleaner; each
claims due rows for a while, so that two never work one at once. For each
execution it
- finds its result tables: names in `results` that start as the execution's do,
  whose properties name the execution (so also tables a crashed unit created
  and never reported);
- deletes the files under ``<table location>/data/<execution id>/`` (written and
  maybe never committed) with the credentials the catalog vends for the table,
  once the location is known to lie inside the warehouse, on the warehouse's
  registered storage endpoint (checked like any user-given endpoint);
- drops the table with purge through the Iceberg REST catalog (in global-sql: through the SQL
  catalog, see sql_catalog_tables).
Then it records DONE, and the execution lists no outputs. A failed attempt is
recorded with its error and retried after a doubling backoff. A warehouse
being deleted takes its tables with it: nothing is left to do there.
Statistics and console messages are kept: they explain the failure.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import asyncpg

from lake_tables.naming import EXECUTION_ID, RESULTS, result_table_prefix
from lake_tables.uncommitted import UnsafeLocation, data_folder, delete_folder
from service_runtime.endpoint_guard import EndpointGuard, EndpointRefused
from service_runtime.errors import ServiceError
from warehouse_service import ledger
from warehouse_service.catalog_client import CatalogError, CatalogUnavailable
from warehouse_service.db import Database

log = logging.getLogger("warehouse_service.cleaner")

#: The vended storage properties the cleaner uses; the endpoint is the registered one.
_STORAGE_KEYS = (
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.region",
    "s3.path-style-access",
    "s3.force-virtual-addressing",
)
_GONE = ("DELETING", "DELETED")


class ResultTables(Protocol):
    """The catalog calls the cleaner makes: CatalogClient's, or SqlCatalogTables'."""

    async def prefix(self, warehouse_name: str) -> str: ...
    async def tables(self, prefix: str, namespace: tuple[str, ...]) -> list[str]: ...
    async def load_table(self, prefix: str, namespace: tuple[str, ...], table: str) -> Any: ...
    async def drop_table(self, prefix: str, namespace: tuple[str, ...], table: str) -> None: ...


class CleanupFailed(Exception):
    """One attempt at an execution's cleanup failed; it is retried later."""


class ExecutionCleaner:
    def __init__(
        self,
        db: Database,
        catalog: ResultTables,
        guard: EndpointGuard,
        *,
        interval_seconds: float,
        max_backoff_seconds: float,
        batch: int = 20,
        hold_seconds: float = 300.0,
    ) -> None:
        self._db = db
        self._catalog = catalog
        self._guard = guard
        self._interval = interval_seconds
        self._max_backoff = max_backoff_seconds
        self._batch = batch
        self._hold = hold_seconds

    async def run_forever(self) -> None:
        while True:
            try:
                await self.clean_due()
            except ServiceError:
                log.warning("cleanup skipped: the database is unavailable")
            await asyncio.sleep(self._interval)

    async def clean_due(self) -> int:
        """Works the cleanups that are due; how many it took."""
        rows = await ledger.claim_cleanups(self._db, self._batch, self._hold)
        for row in rows:
            await self._clean_one(row)
        return len(rows)

    async def _clean_one(self, row: asyncpg.Record) -> None:
        execution_id = row["execution_id"]
        try:
            if row["warehouse_state"] not in _GONE:
                await self._clean(row)
        except Exception as exc:  # recorded and retried later; the other cleanups go on
            expected = isinstance(exc, CleanupFailed)
            failure = str(exc) if expected else f"unexpected {type(exc).__name__}"
            log.warning(
                "cleanup of an execution failed; retrying later",
                exc_info=not expected,
                extra={
                    "execution_id": execution_id,
                    "attempt": row["cleanup_attempts"] + 1,
                    "failure": failure,
                },
            )
            await ledger.cleanup_failed(
                self._db, execution_id, failure, self._interval, self._max_backoff
            )
            return
        await ledger.cleanup_done(self._db, execution_id)
        log.info("execution cleaned up", extra={"execution_id": execution_id})

    async def _clean(self, row: asyncpg.Record) -> None:
        execution_id = row["execution_id"]
        try:
            prefix = await self._catalog.prefix(row["catalog_warehouse_name"])
            names = await self._catalog.tables(prefix, (RESULTS,))
        except CatalogError as exc:
            if exc.status == 404:  # no results namespace: nothing was ever written
                return
            raise CleanupFailed(f"the catalog refused: {exc}") from exc
        except CatalogUnavailable as exc:
            raise CleanupFailed(str(exc)) from exc
        start = result_table_prefix(execution_id)
        for name in names:
            if name.startswith(start):
                await self._drop(row, prefix, name)

    async def _drop(self, row: asyncpg.Record, prefix: str, name: str) -> None:
        """Deletes the table's files of this execution and drops it with purge, unless it is
        another execution's table."""
        execution_id = row["execution_id"]
        try:
            loaded = await self._catalog.load_table(prefix, (RESULTS,), name)
            metadata = loaded["metadata"]
            if metadata.get("properties", {}).get(EXECUTION_ID) != execution_id:
                return
            folder = data_folder(metadata["location"], execution_id, _warehouse_root(row))
            await asyncio.to_thread(self._delete_uncommitted, loaded, folder, row["endpoint"])
            await self._catalog.drop_table(prefix, (RESULTS,), name)
        except CatalogError as exc:
            if exc.status == 404:  # dropped meanwhile (by its unit, say)
                return
            raise CleanupFailed(f"the catalog refused table {name}: {exc}") from exc
        except CatalogUnavailable as exc:
            raise CleanupFailed(str(exc)) from exc
        except (UnsafeLocation, EndpointRefused) as exc:
            raise CleanupFailed(f"table {name}: {exc}") from exc
        except OSError as exc:
            raise CleanupFailed(f"storage refused deleting under table {name}: {exc}") from exc

    def _delete_uncommitted(self, loaded: dict[str, Any], folder: str, endpoint: str) -> None:
        """Deletes folder with the table's vended credentials; without any (a catalog that
        vends none) the purge alone removes the table's location."""
        vended = credentials_for(loaded, folder)
        if vended is None:
            return
        properties = {key: vended[key] for key in _STORAGE_KEYS if key in vended}
        if endpoint:
            properties["s3.endpoint"] = self._guard.pinned(endpoint)
        delete_folder(properties, folder)


def _warehouse_root(row: asyncpg.Record) -> str:
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
