"""The execution ledger's statements: executions (table executions), their outputs
(execution_outputs), and what binding and reporting touch besides (warehouses read, units
marked used)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg
from google.protobuf import json_format

from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2
from warehouse_service.domain.states import TERMINAL_STATES
from warehouse_service.store.db import Connection

_EXECUTION = "SELECT * FROM executions WHERE execution_id = $1"
_EXECUTION_LOCKED = _EXECUTION + " FOR UPDATE"


async def execution(
    connection: Connection, execution_id: str, *, for_update: bool = False
) -> asyncpg.Record | None:
    """The execution (locked FOR UPDATE with for_update)."""
    row: asyncpg.Record | None = await connection.fetchrow(
        _EXECUTION_LOCKED if for_update else _EXECUTION, execution_id
    )
    return row


async def by_request(connection: Connection, owner: str, request_id: str) -> asyncpg.Record | None:
    """The owner's execution bound with request_id (lowercase)."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM executions WHERE owner_user_id = $1 AND request_id = $2",
        owner,
        request_id,
    )
    return row


async def outputs(connection: Connection, execution_id: str) -> list[asyncpg.Record]:
    """The execution's outputs, by operator."""
    rows: list[asyncpg.Record] = await connection.fetch(
        "SELECT * FROM execution_outputs WHERE execution_id = $1 ORDER BY operator_id",
        execution_id,
    )
    return rows


async def registration(connection: Connection, unit_id: str) -> asyncpg.Record | None:
    """The unit's registration state and whether its workers are confined."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT state, workers_confined FROM computing_units WHERE computing_unit_id = $1",
        unit_id,
    )
    return row


async def bind(
    connection: Connection, owner: str, request: registry_service_pb2.BindExecutionRequest
) -> asyncpg.Record | None:
    """A new execution, QUEUED, as request binds it for owner."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        INSERT INTO executions (execution_id, owner_user_id, warehouse_id, computing_unit_id,
                                workflow_id, workflow_fingerprint, request_id, state)
        VALUES ($1, $2, $3, $4, $5, $6, $7, 'QUEUED')
        RETURNING *
        """,
        request.execution_id,
        owner,
        uuid.UUID(request.warehouse_id),
        request.computing_unit_id,
        request.workflow_id,
        request.workflow_fingerprint,
        request.request_id.lower() or None,
    )
    return row


async def move(
    connection: Connection,
    execution_id: str,
    target: str,
    request: registry_service_pb2.UpdateExecutionStateRequest,
) -> asyncpg.Record | None:
    """The execution moved to target, with the error and progress request reports."""
    error = request.error if request.HasField("error") else None
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        UPDATE executions SET
            state = $2,
            started_at = CASE WHEN $2 = 'RUNNING' THEN coalesce(started_at, now()) ELSE started_at END,
            ended_at = CASE WHEN $2 = ANY($3::text[]) THEN now() ELSE NULL END,
            error_reason = coalesce($4, error_reason),
            error_message = coalesce($5, error_message),
            error_operator_id = coalesce($6, error_operator_id),
            progress = coalesce($7::jsonb, progress),
            updated_at = now()
        WHERE execution_id = $1
        RETURNING *
        """,
        execution_id,
        target,
        list(TERMINAL_STATES),
        error.reason if error else None,
        error.message[:4000] if error else None,
        error.operator_id if error else None,
        progress_json(request.progress) if request.HasField("progress") else None,
    )
    return row


async def replace_outputs(
    connection: Connection,
    execution_id: str,
    reported: Sequence[execution_pb2.ExecutionOutput],
) -> None:
    """The execution's outputs, as reported now."""
    await connection.execute("DELETE FROM execution_outputs WHERE execution_id = $1", execution_id)
    await connection.executemany(
        "INSERT INTO execution_outputs VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [
            (
                execution_id,
                o.operator_id,
                o.namespace,
                o.table_name,
                o.row_count,
                o.snapshot_id,
                o.file_count,
            )
            for o in reported
        ],
    )


async def touch_unit(connection: Connection, unit_id: str) -> None:
    """Marks a unit used now, which keeps it from being stopped as idle."""
    await connection.execute("UPDATE units SET last_used_at = now() WHERE unit_id = $1", unit_id)


async def readable_page(
    connection: Connection,
    user_id: str,
    *,
    warehouse_id: uuid.UUID | None,
    states: list[str],
    unit_id: str | None,
    before: tuple[datetime | None, str | None],
    limit: int,
    submitter_only: bool,
) -> Sequence[asyncpg.Record]:
    """A page of executions newest first: of warehouses the user may read (owns or holds a
    role on), the user's own, or everyone's when filtered by one warehouse; with
    submitter_only (one warehouse for everyone), only the user's own."""
    rows: Sequence[asyncpg.Record] = await connection.fetch(
        """
        SELECT e.* FROM executions e
        JOIN warehouses w ON w.warehouse_id = e.warehouse_id
        LEFT JOIN warehouse_members m
            ON m.warehouse_id = e.warehouse_id AND m.user_id = $1
        WHERE ((w.owner_user_id = $1 OR m.user_id IS NOT NULL) AND NOT $8
               OR e.owner_user_id = $1 AND $8)
          AND (e.owner_user_id = $1 OR $2::uuid IS NOT NULL)
          AND ($2::uuid IS NULL OR e.warehouse_id = $2)
          AND (cardinality($3::text[]) = 0 OR e.state = ANY($3::text[]))
          AND ($4::text IS NULL OR e.computing_unit_id = $4)
          AND ($5::timestamptz IS NULL OR (e.created_at, e.execution_id) < ($5, $6::text))
        ORDER BY e.created_at DESC, e.execution_id DESC
        LIMIT $7
        """,
        user_id,
        warehouse_id,
        states,
        unit_id,
        before[0],
        before[1],
        limit,
        submitter_only,
    )
    return rows


async def with_warehouse(connection: Connection, execution_id: str) -> asyncpg.Record | None:
    """The execution with its warehouse's state and catalog name."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        SELECT e.*, w.state AS warehouse_state, w.catalog_warehouse_name
        FROM executions e JOIN warehouses w USING (warehouse_id)
        WHERE e.execution_id = $1
        """,
        execution_id,
    )
    return row


def progress_json(progress: execution_pb2.ExecutionProgress) -> str:
    """An execution's progress as its column holds it."""
    return json.dumps(json_format.MessageToDict(progress))
