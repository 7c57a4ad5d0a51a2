"""The statements of computing units' leases: when one lapsed, the lease sweep's hold, and the
sweep (warehouse_service.background.leases says why the hold is there)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from warehouse_service.store.db import Connection


def lease_lapsed(expires_at: str) -> str:
    """SQL: whether the lease whose expiry is the column expires_at lapsed (its expiry and
    the sweep's hold have both passed)."""
    return f"greatest({expires_at}, (SELECT hold_until FROM lease_sweep_hold)) < now()"  # noqa: S608


_HOLD = """
UPDATE lease_sweep_hold SET hold_until = greatest(hold_until, now() + make_interval(secs => $1))
RETURNING hold_until
"""

_SWEEP = f"""
WITH lost AS (
    UPDATE computing_units SET state = 'LOST'
    WHERE state = 'HEALTHY' AND {lease_lapsed("lease_expires_at")}
    RETURNING computing_unit_id, lease_expires_at
)
UPDATE executions SET
    state = 'FAILED',
    error_reason = 'COMPUTING_UNIT_LOST',
    error_message = 'computing unit ' || lost.computing_unit_id
        || ' stopped sending heartbeats; its lease lapsed at ' || lost.lease_expires_at,
    ended_at = now(),
    updated_at = now()
FROM lost
WHERE executions.computing_unit_id = lost.computing_unit_id
  AND executions.state IN ('QUEUED', 'RUNNING')
RETURNING executions.execution_id, lost.computing_unit_id
"""  # noqa: S608 - lease_lapsed is this module's constant SQL


async def hold(connection: Connection, lease_seconds: float) -> datetime:
    """Holds every replica's sweep until lease_seconds from now (a later hold recorded stays);
    until when it holds."""
    held_until: datetime = await connection.fetchval(_HOLD, lease_seconds)
    return held_until


async def sweep(connection: Connection) -> list[asyncpg.Record]:
    """Marks the healthy units whose lease lapsed LOST and fails their queued and running
    executions; each execution it failed (execution_id) with its unit (computing_unit_id)."""
    rows: list[asyncpg.Record] = await connection.fetch(_SWEEP)
    return rows
