"""The database side of shared warehouses: grants, and a warehouse as one user may see it.

Every lookup reads the grant in the same statement as the warehouse, so each call
decides on the grants as they are at that moment.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from warehouse_service.domain.permissions import Role, require, role_of
from warehouse_service.store.db import Connection

#: A warehouse's row with the role granted to user $2 (NULL without a grant) as granted_role.
_WITH_GRANT = """
    SELECT w.*, m.role AS granted_role FROM warehouses w
    LEFT JOIN warehouse_members m ON m.warehouse_id = w.warehouse_id AND m.user_id = $2
    WHERE w.warehouse_id = $1
"""


async def warehouse_as(
    connection: Connection,
    warehouse_id: str,
    user_id: str,
    needed: Role,
    *,
    lock: bool = False,
) -> tuple[asyncpg.Record, Role]:
    """The warehouse and user_id's role on it, if that role allows `needed` (see
    permissions.require). With lock, the warehouse row is held FOR SHARE (a bind keeps
    archive and delete from slipping in)."""
    row = await connection.fetchrow(
        _WITH_GRANT + (" FOR SHARE OF w" if lock else ""), uuid.UUID(warehouse_id), user_id
    )
    role = Role.NONE if row is None else role_of(user_id, row["owner_user_id"], row["granted_role"])
    require(role, needed, warehouse_id)
    assert row is not None
    return row, role


async def role_on(connection: Connection, warehouse_id: uuid.UUID, user_id: str) -> Role:
    """user_id's role on an existing warehouse."""
    row = await connection.fetchrow(_WITH_GRANT, warehouse_id, user_id)
    if row is None:
        return Role.NONE
    return role_of(user_id, row["owner_user_id"], row["granted_role"])


async def visible_warehouses(
    connection: Connection,
    user_id: str,
    states: list[str],
    after: tuple[datetime | None, uuid.UUID | None],
    limit: int,
) -> list[asyncpg.Record]:
    """Up to limit warehouses user_id owns or holds a role on, in one of states, created after
    the position `after` (creation time, id), oldest first; each with granted_role."""
    rows: list[asyncpg.Record] = await connection.fetch(
        """
        SELECT w.*, m.role AS granted_role FROM warehouses w
        LEFT JOIN warehouse_members m ON m.warehouse_id = w.warehouse_id AND m.user_id = $1
        WHERE (w.owner_user_id = $1 OR m.user_id IS NOT NULL)
          AND w.state = ANY($2::text[])
          AND ($3::timestamptz IS NULL OR (w.created_at, w.warehouse_id) > ($3, $4::uuid))
        ORDER BY w.created_at, w.warehouse_id
        LIMIT $5
        """,
        user_id,
        states,
        after[0],
        after[1],
        limit,
    )
    return rows


async def grant(
    connection: Connection, warehouse_id: uuid.UUID, user_id: str, role: Role, granted_by: str
) -> asyncpg.Record:
    """Grants role, replacing a role granted before; the grant time moves only when the
    role changes."""
    row: asyncpg.Record | None = await connection.fetchrow(
        """
        INSERT INTO warehouse_members (warehouse_id, user_id, role, granted_by_user_id)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (warehouse_id, user_id) DO UPDATE SET
            role = excluded.role, granted_by_user_id = excluded.granted_by_user_id,
            granted_at = CASE WHEN warehouse_members.role = excluded.role
                              THEN warehouse_members.granted_at ELSE now() END
        RETURNING *
        """,
        warehouse_id,
        user_id,
        role.name,
        granted_by,
    )
    assert row is not None
    return row


async def revoke(connection: Connection, warehouse_id: uuid.UUID, user_id: str) -> None:
    await connection.execute(
        "DELETE FROM warehouse_members WHERE warehouse_id = $1 AND user_id = $2",
        warehouse_id,
        user_id,
    )


async def members(
    connection: Connection, warehouse_id: uuid.UUID, after_user_id: str, limit: int
) -> list[asyncpg.Record]:
    """Up to limit members whose user id sorts after after_user_id, by user id."""
    rows: list[asyncpg.Record] = await connection.fetch(
        "SELECT * FROM warehouse_members WHERE warehouse_id = $1 AND user_id > $2 "
        "ORDER BY user_id LIMIT $3",
        warehouse_id,
        after_user_id,
        limit,
    )
    return rows
