"""The statements about computing units' registrations and leases (table computing_units), and
what a registration changes besides: the unit's unfinished executions, and its record."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from warehouse_service.store.db import Connection


async def launch_address(connection: Connection, unit_id: str) -> str | None:
    """Where the unit's launcher said it serves; None when it gave no address."""
    launched: str | None = await connection.fetchval(
        "SELECT launch_address FROM units WHERE unit_id = $1", unit_id
    )
    return launched


async def healthy(connection: Connection, unit_id: str) -> asyncpg.Record | None:
    """The unit's registration if it is HEALTHY and its lease has not expired."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM computing_units WHERE computing_unit_id = $1 "
        "AND state = 'HEALTHY' AND lease_expires_at > now()",
        unit_id,
    )
    return row


async def fail_unfinished(connection: Connection, unit_id: str) -> str:
    """Fails the unit's unfinished executions (it restarted: what it ran is gone); the
    statement's status ("UPDATE <count>")."""
    status: str = await connection.execute(
        """
        UPDATE executions SET state = 'FAILED', error_reason = 'COMPUTING_UNIT_RESTARTED',
            error_message = 'the computing unit restarted while the execution was unfinished',
            ended_at = now(), updated_at = now()
        WHERE computing_unit_id = $1 AND state IN ('QUEUED', 'RUNNING')
        """,
        unit_id,
    )
    return status


async def register(
    connection: Connection,
    unit_id: str,
    endpoint: str,
    capacity: int,
    *,
    workers_confined: bool,
    lease_seconds: float,
) -> asyncpg.Record | None:
    """The unit registered (again) as HEALTHY with a fresh lease, its counts reset; and its
    record RUNNING if it was being provisioned."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        INSERT INTO computing_units (computing_unit_id, endpoint, capacity, workers_confined,
                                     state, registered_at, last_heartbeat_at,
                                     lease_expires_at)
        VALUES ($1, $2, $3, $5, 'HEALTHY', now(), now(),
                now() + make_interval(secs => $4))
        ON CONFLICT (computing_unit_id) DO UPDATE SET
            endpoint = excluded.endpoint, capacity = excluded.capacity,
            workers_confined = excluded.workers_confined, state = 'HEALTHY',
            running_executions = 0, queued_executions = 0, registered_at = now(),
            last_heartbeat_at = now(), lease_expires_at = excluded.lease_expires_at
        RETURNING *
        """,
        unit_id,
        endpoint,
        capacity,
        lease_seconds,
        workers_confined,
    )
    await connection.execute(
        "UPDATE units SET state = 'RUNNING', state_message = '', updated_at = now(), "
        "last_used_at = now() WHERE unit_id = $1 AND state = 'PROVISIONING'",
        unit_id,
    )
    return row


async def renew_lease(
    connection: Connection, unit_id: str, running: int, queued: int, lease_seconds: float
) -> asyncpg.Record | None:
    """A healthy registration's lease renewed and its counts updated; None when it lapsed."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        UPDATE computing_units SET running_executions = $2, queued_executions = $3,
            last_heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => $4)
        WHERE computing_unit_id = $1 AND state = 'HEALTHY'
        RETURNING *
        """,
        unit_id,
        running,
        queued,
        lease_seconds,
    )
    return row


async def ended_executions(
    connection: Connection, unit_id: str, execution_ids: Sequence[str]
) -> list[str]:
    """Those of the executions, bound to the unit, that the ledger holds as ended."""
    if not execution_ids:
        return []
    rows = await connection.fetch(
        "SELECT execution_id FROM executions WHERE execution_id = ANY($2::text[]) "
        "AND computing_unit_id = $1 AND state NOT IN ('QUEUED', 'RUNNING') "
        "ORDER BY execution_id",
        unit_id,
        list(execution_ids),
    )
    return [row["execution_id"] for row in rows]


async def least_loaded(
    connection: Connection, healthy_only: bool, offset: int, limit: int
) -> Sequence[asyncpg.Record]:
    """Registrations, the least loaded first (a page of them)."""
    rows: Sequence[asyncpg.Record] = await connection.fetch(
        """
        SELECT * FROM computing_units
        WHERE NOT $1 OR (state = 'HEALTHY' AND lease_expires_at > now())
        ORDER BY (running_executions + queued_executions)::float / capacity, computing_unit_id
        OFFSET $2 LIMIT $3
        """,
        healthy_only,
        offset,
        limit,
    )
    return rows


async def unregister(connection: Connection, unit_id: str, why: str) -> None:
    """Ends a unit's registration, failing what it still ran (when why says why)."""
    await connection.execute(
        "UPDATE computing_units SET state = 'LOST' WHERE computing_unit_id = $1", unit_id
    )
    if why:
        await connection.execute(
            """
            UPDATE executions SET state = 'FAILED', error_reason = 'COMPUTING_UNIT_LOST',
                error_message = $2, ended_at = now(), updated_at = now()
            WHERE computing_unit_id = $1 AND state IN ('QUEUED', 'RUNNING')
            """,
            unit_id,
            why[:4000],
        )
