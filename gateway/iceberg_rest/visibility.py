"""What a user sees of a warehouse through the Iceberg REST endpoint: the warehouse's binding
(with a read-only catalog token), if the registry says the user may read it, and the tables of
its executions that are running or succeeded, never a failed or cancelled one's."""

from __future__ import annotations

from dataclasses import dataclass

from catalog_map.registry import RegistryReader
from gateway.iceberg_rest.tables import VISIBLE_STATES, iceberg_tables
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, execution_service_pb2

#: The registry's largest page of executions.
_PAGE = 500

TableName = tuple[str, str]


@dataclass(frozen=True)
class WarehouseView:
    """A warehouse as one user may read it."""

    binding: registry_service_pb2.CatalogBinding
    tables: frozenset[TableName]

    @property
    def namespaces(self) -> list[str]:
        return sorted({namespace for namespace, _ in self.tables})

    def tables_in(self, namespace: str) -> list[str]:
        return sorted(name for space, name in self.tables if space == namespace)


def execution_tables(execution: execution_pb2.Execution) -> set[TableName]:
    """An execution's tables: its results, its runtime statistics and its console log."""
    return {(table.namespace, table.name) for table in iceberg_tables(execution)}


async def warehouse_view(reader: RegistryReader, warehouse_id: str) -> WarehouseView:
    """The warehouse as the calling user (in the call's context) may read it; the registry's
    NOT_FOUND, as a ServiceError, for a warehouse the user may not read."""
    binding = await reader.resolve_warehouse(warehouse_id)
    tables: set[TableName] = set()
    page_token = ""
    while True:
        listed = await reader.list_executions(
            execution_service_pb2.ListExecutionsRequest(
                warehouse_id=warehouse_id,
                states=VISIBLE_STATES,
                page_size=_PAGE,
                page_token=page_token,
            )
        )
        for execution in listed.executions:
            tables |= execution_tables(execution)
        page_token = listed.next_page_token
        if not page_token:
            return WarehouseView(binding, frozenset(tables))
