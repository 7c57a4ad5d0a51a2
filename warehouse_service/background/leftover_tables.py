"""Tables a warehouse holds only until the cleaner drops them.

The cleaner drops every table of a deleted execution, and the result tables of one that failed
or was cancelled (see warehouse_service.background.cleaner). Until it has, such tables still stand in the
catalog; DeleteWarehouse without purge does not count them as the warehouse's contents, so that
it answers the same whether or not the cleaner has run (the warehouse's deletion drops them).
A table counts as a leftover only when its name is one of that execution's and its
`texera.execution-id` property says so: another execution's id may sanitize alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from lake_tables.naming import (
    EXECUTION_ID,
    RESULTS,
    execution_table,
    result_table_prefix,
)
from warehouse_service.catalog.catalog_purge import Contents
from warehouse_service.catalog.tables import CatalogTables


class _Names:
    """Which executions being removed each table name may belong to."""

    def __init__(self, removing: Mapping[str, bool]) -> None:
        self.results: dict[str, list[str]] = {}
        self.telemetry: dict[str, list[str]] = {}
        for execution_id, deleted in removing.items():
            self.results.setdefault(result_table_prefix(execution_id), []).append(execution_id)
            if deleted:
                self.telemetry.setdefault(execution_table(execution_id), []).append(execution_id)

    def of(self, namespace: tuple[str, ...], name: str) -> list[str]:
        if namespace == (RESULTS,):
            return self.results.get(name.partition("__")[0] + "__", [])
        return self.telemetry.get(name, [])


async def kept(
    catalog: CatalogTables, prefix: str, contents: Contents, removing: Mapping[str, bool]
) -> int:
    """How many of the listed tables are not leftovers of the executions being removed
    (execution id -> whether it was deleted)."""
    names = _Names(removing)
    count = 0
    for namespace, tables in contents.items():
        for name in tables:
            candidates = names.of(namespace, name)
            if not candidates or not await _belongs(catalog, prefix, namespace, name, candidates):
                count += 1
    return count


async def _belongs(
    catalog: CatalogTables,
    prefix: str,
    namespace: tuple[str, ...],
    name: str,
    candidates: list[str],
) -> bool:
    loaded = await catalog.load_table(prefix, namespace, name, vended_credentials=False)
    return loaded["metadata"].get("properties", {}).get(EXECUTION_ID) in candidates
