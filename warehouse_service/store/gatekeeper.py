"""What the catalog gatekeeper reads of the registry's database: every statement it runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import asyncpg

from warehouse_service.store.db import Database


class GatekeeperStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def warehouse(self, warehouse_id: str) -> asyncpg.Record | None:
        """The warehouse's owner, catalog name and id, state and credential version."""
        async with self._db.connection() as connection:
            row: asyncpg.Record | None = await connection.fetchrow(
                """
                SELECT warehouse_id, owner_user_id, catalog_warehouse_id, catalog_warehouse_name,
                       state, credential_version
                FROM warehouses WHERE warehouse_id = $1
                """,
                uuid.UUID(warehouse_id),
            )
        return row

    async def standing(self, warehouse_id: str, execution_id: str) -> asyncpg.Record | None:
        """The warehouse (as warehouse() reads it) and, in execution_* columns, the execution
        (as execution() reads it, NULLs when it is not bound yet): one round trip per request."""
        async with self._db.connection() as connection:
            row: asyncpg.Record | None = await connection.fetchrow(
                """
                SELECT w.warehouse_id, w.owner_user_id, w.catalog_warehouse_id,
                       w.catalog_warehouse_name, w.state, w.credential_version,
                       e.warehouse_id AS execution_warehouse_id,
                       e.computing_unit_id AS execution_unit_id,
                       e.owner_user_id AS execution_owner_user_id,
                       e.state AS execution_state
                FROM warehouses w LEFT JOIN executions e ON e.execution_id = $2
                WHERE w.warehouse_id = $1
                """,
                uuid.UUID(warehouse_id),
                execution_id,
            )
        return row

    async def execution(self, execution_id: str) -> asyncpg.Record | None:
        """Where the execution writes, which unit runs it, for whom, and its state."""
        async with self._db.connection() as connection:
            row: asyncpg.Record | None = await connection.fetchrow(
                """
                SELECT warehouse_id, computing_unit_id, owner_user_id, state
                FROM executions WHERE execution_id = $1
                """,
                execution_id,
            )
        return row

    async def results_of(
        self, owner_user_id: str, warehouse_id: str, tables: Iterable[tuple[str, ...]]
    ) -> set[tuple[str, ...]]:
        """Those of tables that hold a result of an execution owner_user_id submitted into the
        warehouse."""
        wanted = [t for t in tables if len(t) == 2]
        if not wanted:
            return set()
        async with self._db.connection() as connection:
            rows = await connection.fetch(
                """
                SELECT o.namespace, o.table_name
                FROM execution_outputs o JOIN executions e USING (execution_id)
                WHERE e.owner_user_id = $1 AND e.warehouse_id = $2
                  AND (o.namespace, o.table_name) IN (SELECT * FROM unnest($3::text[], $4::text[]))
                """,
                owner_user_id,
                uuid.UUID(warehouse_id),
                [t[0] for t in wanted],
                [t[1] for t in wanted],
            )
        return {(row["namespace"], row["table_name"]) for row in rows}
