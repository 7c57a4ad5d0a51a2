"""The SQL of deleting executions and of retention policies (migration 0006)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from warehouse_service.store.db import Connection, present

#: The states an execution may be deleted in; queued and running ones never are.
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


async def mark_deleted(connection: Connection, execution_ids: Sequence[str]) -> list[str]:
    """Tombstones the ended executions among execution_ids that are not deleted yet: from now
    on they list no outputs, and the cleanup queue drops their tables. Which it marked."""
    marked: list[str] = [
        row["execution_id"]
        for row in await connection.fetch(
            """
            UPDATE executions SET deleted_at = now(), updated_at = now(),
                cleanup_state = 'PENDING', cleanup_next_at = now(), cleanup_attempts = 0,
                cleanup_error = ''
            WHERE execution_id = ANY($1::text[]) AND deleted_at IS NULL
              AND state = ANY($2::text[])
            RETURNING execution_id
            """,
            list(execution_ids),
            list(ENDED),
        )
    ]
    await connection.execute(
        "DELETE FROM execution_outputs WHERE execution_id = ANY($1::text[])", marked
    )
    return marked


async def execution_for_update(connection: Connection, execution_id: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM executions WHERE execution_id = $1 FOR UPDATE", execution_id
    )
    return row


async def warehouse_state(connection: Connection, warehouse_id: uuid.UUID) -> str:
    """The warehouse's state, held FOR SHARE so that archive and delete wait for the caller."""
    state: str = await connection.fetchval(
        "SELECT state FROM warehouses WHERE warehouse_id = $1 FOR SHARE", warehouse_id
    )
    return state


async def due_by_policy(connection: Connection, limit: int) -> list[str]:
    """Up to limit ended, undeleted executions of active warehouses that their warehouse's
    policy says to delete: ended longer ago than max_age, or not among the newest keep_last
    of their workflow (queued and running ones count among the newest)."""
    rows = await connection.fetch(
        """
        WITH ranked AS (
            SELECT e.execution_id, e.state, e.ended_at, p.max_age_seconds, p.keep_last,
                   row_number() OVER (PARTITION BY e.warehouse_id, e.workflow_id
                                      ORDER BY e.created_at DESC, e.execution_id DESC) AS newest
            FROM executions e
            JOIN warehouse_retention p ON p.warehouse_id = e.warehouse_id
            JOIN warehouses w ON w.warehouse_id = e.warehouse_id
            WHERE e.deleted_at IS NULL AND w.state = 'ACTIVE'
        )
        SELECT execution_id FROM ranked
        WHERE state = ANY($2::text[])
          AND (ended_at < now() - make_interval(secs => max_age_seconds)
               OR newest > keep_last)
        LIMIT $1
        """,
        limit,
        list(ENDED),
    )
    return [row["execution_id"] for row in rows]


async def policy(connection: Connection, warehouse_id: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM warehouse_retention WHERE warehouse_id = $1", uuid.UUID(warehouse_id)
    )
    return row


async def save_policy(
    connection: Connection, warehouse_id: str, max_age_seconds: int | None, keep_last: int | None
) -> asyncpg.Record:
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        INSERT INTO warehouse_retention (warehouse_id, max_age_seconds, keep_last)
        VALUES ($1, $2, $3)
        ON CONFLICT (warehouse_id) DO UPDATE SET max_age_seconds = excluded.max_age_seconds,
            keep_last = excluded.keep_last, updated_at = now()
        RETURNING *
        """,
        uuid.UUID(warehouse_id),
        max_age_seconds,
        keep_last,
    )
    return present(row)


async def output_tables(connection: Connection, execution_id: str) -> list[tuple[str, str]]:
    """(namespace, table name) of each output the ledger lists for the execution."""
    rows = await connection.fetch(
        "SELECT namespace, table_name FROM execution_outputs WHERE execution_id = $1",
        execution_id,
    )
    return [(row["namespace"], row["table_name"]) for row in rows]


async def executions_being_removed(
    connection: Connection, warehouse_id: uuid.UUID
) -> dict[str, bool]:
    """The warehouse's executions whose tables the cleaner drops, each with whether it was
    deleted (all its tables go) or not (it failed or was cancelled: its results go)."""
    rows = await connection.fetch(
        "SELECT execution_id, deleted_at IS NOT NULL AS deleted FROM executions "
        "WHERE warehouse_id = $1 AND (deleted_at IS NOT NULL OR state IN ('FAILED', 'CANCELLED'))",
        warehouse_id,
    )
    return {row["execution_id"]: row["deleted"] for row in rows}
