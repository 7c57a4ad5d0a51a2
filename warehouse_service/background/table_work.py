"""Work on an execution's tables through the catalog and storage, failing as the queues
expect (see queue_worker): a refusal or an outage is WorkFailed, retried later; a table that
is not there is not an error, since every step may be repeated after a crash."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lake_tables.uncommitted import UnsafeLocation
from service_runtime.endpoint_guard import EndpointRefused
from warehouse_service.background.queue_worker import WorkFailed
from warehouse_service.catalog.tables import CatalogError, CatalogTables, CatalogUnavailable
from warehouse_service.store.db import Record


async def warehouse_prefix(catalog: CatalogTables, row: Record) -> str:
    """The Iceberg prefix of the claimed row's warehouse."""
    try:
        return await catalog.prefix(row["catalog_warehouse_name"])
    except CatalogError as exc:
        raise WorkFailed(f"the catalog refused: {exc}") from exc
    except CatalogUnavailable as exc:
        raise WorkFailed(str(exc)) from exc


@contextlib.contextmanager
def on_table(name: str) -> Iterator[None]:
    """Runs the body's work on table name; a 404 of the catalog ends it quietly (never
    created, or dropped meanwhile), other failures become WorkFailed."""
    try:
        yield
    except CatalogError as exc:
        if exc.status != 404:
            raise WorkFailed(f"the catalog refused table {name}: {exc}") from exc
    except CatalogUnavailable as exc:
        raise WorkFailed(str(exc)) from exc
    except (UnsafeLocation, EndpointRefused) as exc:
        raise WorkFailed(f"table {name}: {exc}") from exc
    except OSError as exc:
        raise WorkFailed(f"storage refused under table {name}: {exc}") from exc
