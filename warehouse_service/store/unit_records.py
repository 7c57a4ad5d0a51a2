"""The statements about users' computing units as the API shows them (table units) and whom
they are shared with (unit_shares)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import asyncpg

from texera.lake.v1 import computing_unit_service_pb2
from warehouse_service.store.db import Connection


async def create(
    connection: Connection,
    unit_id: str,
    owner: str,
    unit: computing_unit_service_pb2.ComputingUnit,
    *,
    request_id: str | None,
    fingerprint: str,
) -> asyncpg.Record | None:
    """A new unit, PROVISIONING; None when owner's request_id made one already."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        INSERT INTO units (unit_id, owner_user_id, display_name, cores, memory_mib, state,
                           create_request_id, request_fingerprint)
        VALUES ($1, $2, $3, $4, $5, 'PROVISIONING', $6, $7)
        ON CONFLICT (owner_user_id, create_request_id) DO NOTHING
        RETURNING *
        """,
        unit_id,
        owner,
        unit.display_name,
        unit.cores,
        unit.memory_mib,
        request_id,
        fingerprint,
    )
    return row


async def by_request(connection: Connection, owner: str, request_id: str) -> asyncpg.Record | None:
    """The unit owner's request_id made."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "SELECT * FROM units WHERE owner_user_id = $1 AND create_request_id = $2",
        owner,
        request_id,
    )
    return row


async def usable_unit(
    connection: Connection,
    unit_id: str,
    user_id: str,
    *,
    lock: Literal["", "FOR NO KEY UPDATE"] = "",
) -> asyncpg.Record | None:
    """The unit if user_id owns it or it was shared with user_id, and it is not deleted."""
    row: asyncpg.Record | None = await connection.fetchrow(
        f"""
        SELECT * FROM units
        WHERE unit_id = $1 AND state <> 'DELETED'
          AND (owner_user_id = $2
               OR EXISTS (SELECT 1 FROM unit_shares s WHERE s.unit_id = $1 AND s.user_id = $2))
        {lock}
        """,  # noqa: S608 - lock is one of the clauses its type allows
        unit_id,
        user_id,
    )
    return row


async def visible_page(
    connection: Connection,
    user: str,
    after: tuple[datetime | None, str | None],
    limit: int,
) -> Sequence[asyncpg.Record]:
    """A page of the units user owns or was shared, oldest first."""
    rows: Sequence[asyncpg.Record] = await connection.fetch(
        """
        SELECT * FROM units u
        WHERE state <> 'DELETED'
          AND (owner_user_id = $1 OR EXISTS (
                SELECT 1 FROM unit_shares s WHERE s.unit_id = u.unit_id AND s.user_id = $1))
          AND ($2::timestamptz IS NULL OR (created_at, unit_id) > ($2, $3::text))
        ORDER BY created_at, unit_id
        LIMIT $4
        """,
        user,
        after[0],
        after[1],
        limit,
    )
    return rows


async def shared_with(connection: Connection, unit_id: str) -> list[str]:
    """The users the unit is shared with."""
    return [
        r["user_id"]
        for r in await connection.fetch(
            "SELECT user_id FROM unit_shares WHERE unit_id = $1", unit_id
        )
    ]


async def share(connection: Connection, unit_id: str, user_id: str) -> None:
    await connection.execute(
        "INSERT INTO unit_shares (unit_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        unit_id,
        user_id,
    )


async def unshare(connection: Connection, unit_id: str, user_id: str) -> list[str]:
    """Ends the share and cancels, in the ledger, what the user still runs or queues on the
    unit (the unit hears it with its next heartbeat); returns those executions' ids."""
    await connection.execute(
        "DELETE FROM unit_shares WHERE unit_id = $1 AND user_id = $2", unit_id, user_id
    )
    rows = await connection.fetch(
        """
        UPDATE executions SET state = 'CANCELLED', error_reason = 'COMPUTING_UNIT_UNSHARED',
            error_message = 'the computing unit is no longer shared with its submitter',
            ended_at = now(), updated_at = now()
        WHERE computing_unit_id = $1 AND owner_user_id = $2 AND state IN ('QUEUED', 'RUNNING')
        RETURNING execution_id
        """,
        unit_id,
        user_id,
    )
    return sorted(row["execution_id"] for row in rows)


async def workers_confined(connection: Connection, unit_id: str) -> bool | None:
    """Whether the unit's latest registration said its workers are confined; None if it never
    registered."""
    confined: bool | None = await connection.fetchval(
        "SELECT workers_confined FROM computing_units WHERE computing_unit_id = $1", unit_id
    )
    return confined
