"""Work the registry owes executions, queued in their own ledger rows.

Two queues, each a set of columns of `executions`: the cleanup (migration 0003: a failed or
cancelled execution's results, every table of a deleted one) and the maintenance (migration
0006: an ended execution's superseded telemetry snapshots and unreferenced files). A row is
due when its state is PENDING and its next attempt time has come; whoever claims it holds it
for a while, so that two replicas of the registry never work one at once and a replica that
dies mid-work leaves it to the others once the hold lapses. A failed attempt is recorded
and retried after a doubling backoff; a done one is recorded once.
"""

from __future__ import annotations

import enum

import asyncpg

from warehouse_service.store.db import Database


def retry_at(attempts_column: str) -> str:
    """SQL for when a failed attempt is due again: after waits that double from $3 seconds
    with every attempt counted in attempts_column, up to $4 seconds."""
    return f"now() + make_interval(secs => least($4, $3 * power(2, least({attempts_column}, 30))))"


class Queue(enum.Enum):
    """A queue, by the prefix of its columns (`<prefix>_state`, `_attempts`, `_next_at`,
    `_error`) and the column that records when it was done."""

    CLEANUP = ("cleanup", "cleaned_at")
    MAINTENANCE = ("maintenance", "maintained_at")

    def __init__(self, prefix: str, done_column: str) -> None:
        self.prefix = prefix
        self.done_column = done_column


async def claim(
    db: Database, queue: Queue, limit: int, hold_seconds: float, settled_seconds: float = 0.0
) -> list[asyncpg.Record]:
    """Up to limit due rows of queue whose execution ended at least settled_seconds ago (or
    has not ended), each with its warehouse; each is held for hold_seconds. A warehouse that
    is archived waits: its catalog answers nothing until it is restored."""
    q = queue.prefix
    async with db.transaction() as connection:
        rows: list[asyncpg.Record] = await connection.fetch(
            f"""
            WITH due AS (
                SELECT e.execution_id FROM executions e
                JOIN warehouses w ON w.warehouse_id = e.warehouse_id
                WHERE e.{q}_state = 'PENDING' AND e.{q}_next_at <= now()
                  AND w.state <> 'ARCHIVED'
                  AND coalesce(e.ended_at, now()) <= now() - make_interval(secs => $3)
                ORDER BY e.{q}_next_at LIMIT $1
                FOR UPDATE OF e SKIP LOCKED
            )
            UPDATE executions SET {q}_next_at = now() + make_interval(secs => $2)
            FROM due, warehouses
            WHERE executions.execution_id = due.execution_id
              AND warehouses.warehouse_id = executions.warehouse_id
            RETURNING executions.execution_id, executions.state, executions.deleted_at,
                      executions.{q}_attempts AS attempts,
                      warehouses.state AS warehouse_state, warehouses.catalog_warehouse_name,
                      warehouses.bucket, warehouses.key_prefix, warehouses.endpoint
            """,  # noqa: S608 - the column names are the queue's constants
            limit,
            hold_seconds,
            settled_seconds,
        )
    return rows


async def done(db: Database, queue: Queue, execution_id: str) -> None:
    q = queue.prefix
    async with db.connection() as connection:
        await connection.execute(
            f"UPDATE executions SET {q}_state = 'DONE', {queue.done_column} = now(), "  # noqa: S608
            f"{q}_error = '', {q}_next_at = NULL "
            f"WHERE execution_id = $1 AND {q}_state = 'PENDING'",
            execution_id,
        )


async def failed(
    db: Database,
    queue: Queue,
    execution_id: str,
    error: str,
    *,
    backoff_seconds: float,
    max_backoff_seconds: float,
) -> None:
    """Records a failed attempt; the next one is due after an exponential backoff."""
    q = queue.prefix
    async with db.connection() as connection:
        await connection.execute(
            f"""
            UPDATE executions SET
                {q}_attempts = {q}_attempts + 1,
                {q}_error = $2,
                {q}_next_at = {retry_at(f"{q}_attempts")}
            WHERE execution_id = $1 AND {q}_state = 'PENDING'
            """,  # noqa: S608 - the column names are the queue's constants
            execution_id,
            error[:1000],
            backoff_seconds,
            max_backoff_seconds,
        )
