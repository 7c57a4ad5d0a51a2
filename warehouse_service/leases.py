"""Computing-unit leases: a unit that stops heartbeating loses its unfinished executions.

Every replica of the registry runs the sweep; it is one idempotent statement,
so replicas sweeping at once mark each unit and execution once.
"""

from __future__ import annotations

import asyncio
import logging

from service_runtime.errors import ServiceError
from warehouse_service.db import Database

log = logging.getLogger("warehouse_service.leases")

_SWEEP = """
WITH lost AS (
    UPDATE computing_units SET state = 'LOST'
    WHERE state = 'HEALTHY' AND lease_expires_at < now()
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
"""


async def sweep(db: Database) -> list[str]:
    """Marks units with a lapsed lease LOST and fails their unfinished executions."""
    async with db.transaction() as connection:
        rows = await connection.fetch(_SWEEP)
    for row in rows:
        log.warning(
            "execution failed: its computing unit was lost",
            extra={
                "execution_id": row["execution_id"],
                "computing_unit_id": row["computing_unit_id"],
            },
        )
    return [row["execution_id"] for row in rows]


async def sweep_forever(db: Database, interval_seconds: float) -> None:
    while True:
        await asyncio.sleep(interval_seconds)
        try:
            await sweep(db)
        except ServiceError:
            log.warning("lease sweep skipped: the database is unavailable")
