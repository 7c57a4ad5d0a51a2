"""The database side of usage: executions' figures, due readings, and warehouses' sums.

An execution's row appears when it ends (a trigger of migration 0005), due for a reading. The
sums per warehouse follow every change of an execution's figures by trigger, in the same
transaction, so a warehouse's usage is one row to read.
"""

from __future__ import annotations

import uuid

import asyncpg

from warehouse_service.domain.usage_figures import Usage
from warehouse_service.store.db import Connection, Database
from warehouse_service.store.work_queue import retry_at


async def schedule(connection: Connection, execution_id: str) -> None:
    """Makes a new reading of an ended execution's figures due, for whatever changed its
    tables since (a cleanup, a deletion, snapshot expiry)."""
    await connection.execute(
        "UPDATE execution_usage SET measure_due_at = now(), measure_attempts = 0 "
        "WHERE execution_id = $1",
        execution_id,
    )


async def schedule_warehouse(connection: Connection, warehouse_id: uuid.UUID) -> None:
    """Makes a new reading of every ended execution of the warehouse due (it was deleted:
    its tables are gone)."""
    await connection.execute(
        "UPDATE execution_usage SET measure_due_at = now(), measure_attempts = 0 "
        "WHERE warehouse_id = $1",
        warehouse_id,
    )


async def claim_due(db: Database, limit: int, hold_seconds: float) -> list[asyncpg.Record]:
    """Up to limit due readings, each with its warehouse and the result tables the ledger
    lists for the execution; each is held for hold_seconds, so that another replica of the
    registry does not take it meanwhile."""
    async with db.transaction() as connection:
        rows: list[asyncpg.Record] = await connection.fetch(
            """
            WITH due AS (
                SELECT execution_id, measure_due_at FROM execution_usage
                WHERE measure_due_at <= now()
                ORDER BY measure_due_at LIMIT $1
                FOR UPDATE SKIP LOCKED
            ), held AS (
                UPDATE execution_usage u SET measure_due_at = now() + make_interval(secs => $2)
                FROM due WHERE u.execution_id = due.execution_id
                RETURNING u.execution_id, u.warehouse_id, u.measure_attempts
            )
            SELECT held.*, w.state AS warehouse_state, w.catalog_warehouse_name,
                   coalesce(array_agg(o.table_name ORDER BY o.table_name)
                            FILTER (WHERE o.table_name IS NOT NULL), '{}') AS result_tables
            FROM held
            JOIN warehouses w ON w.warehouse_id = held.warehouse_id
            LEFT JOIN execution_outputs o
                ON o.execution_id = held.execution_id AND o.namespace = 'results'
            GROUP BY held.execution_id, held.warehouse_id, held.measure_attempts,
                     w.state, w.catalog_warehouse_name
            """,
            limit,
            hold_seconds,
        )
    return rows


async def record(db: Database, execution_id: str, usage: Usage) -> None:
    """Stores a reading. It settles the claimed one (due in the future: held) unless another
    reading was asked for since (due now), which then stays due."""
    async with db.connection() as connection:
        await connection.execute(
            """
            UPDATE execution_usage SET
                bytes = $2, data_files = $3, rows = $4, snapshots = $5, tables = $6,
                measured_at = now(), measure_attempts = 0, measure_error = '',
                measure_due_at = CASE WHEN measure_due_at > now() THEN NULL
                                      ELSE measure_due_at END
            WHERE execution_id = $1
            """,
            execution_id,
            usage.bytes,
            usage.data_files,
            usage.rows,
            usage.snapshots,
            usage.tables,
        )


async def failed(
    db: Database, execution_id: str, error: str, backoff_seconds: float, max_backoff_seconds: float
) -> None:
    """Records a failed reading; the next is due after a doubling backoff."""
    async with db.connection() as connection:
        await connection.execute(
            """
            UPDATE execution_usage SET
                measure_attempts = measure_attempts + 1,
                measure_error = $2,
                measure_due_at = """
            + retry_at("measure_attempts")
            + """
            WHERE execution_id = $1
            """,
            execution_id,
            error[:1000],
            backoff_seconds,
            max_backoff_seconds,
        )


async def of_execution(connection: Connection, execution_id: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM execution_usage WHERE execution_id = $1", execution_id
    )
    return row


async def execution_warehouse(connection: Connection, execution_id: str) -> asyncpg.Record | None:
    """The execution's warehouse_id and submitter (owner_user_id), with the warehouse's state
    as warehouse_state."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT e.warehouse_id, e.owner_user_id, w.state AS warehouse_state FROM executions e "
        "JOIN warehouses w USING (warehouse_id) WHERE e.execution_id = $1",
        execution_id,
    )
    return row


async def of_warehouse(connection: Connection, warehouse_id: uuid.UUID) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM warehouse_usage WHERE warehouse_id = $1", warehouse_id
    )
    return row


async def of_every_warehouse(db: Database) -> list[asyncpg.Record]:
    """The sums of every warehouse not deleted, for the metrics."""
    async with db.connection() as connection:
        rows: list[asyncpg.Record] = await connection.fetch(
            "SELECT u.* FROM warehouse_usage u JOIN warehouses w USING (warehouse_id) "
            "WHERE w.state <> 'DELETED'"
        )
    return rows
