"""The statements about users' warehouses as the API shows them (table warehouses) and the
credential rotations done on them (credential_rotations)."""

from __future__ import annotations

import uuid

from texera.lake.v1 import warehouse_pb2
from warehouse_service.domain.states import FLAVOR_NAMES
from warehouse_service.store.db import Connection, Record

_WAREHOUSE = "SELECT * FROM warehouses WHERE warehouse_id = $1"
#: FOR SHARE: a bind keeps the row from changing under it.
_WAREHOUSE_SHARED = _WAREHOUSE + " FOR SHARE"
_UNFINISHED = ["QUEUED", "RUNNING"]


async def warehouse(
    connection: Connection, warehouse_id: uuid.UUID, *, lock: bool = False
) -> Record | None:
    """The warehouse (locked FOR SHARE with lock)."""
    row: Record | None = await connection.fetchrow(
        _WAREHOUSE_SHARED if lock else _WAREHOUSE, warehouse_id
    )
    return row


async def by_request(connection: Connection, owner: str, request_id: str) -> Record | None:
    """The warehouse owner's request_id (lowercase) created."""
    row: Record | None = await connection.fetchrow(
        "SELECT * FROM warehouses WHERE owner_user_id = $1 AND create_request_id = $2",
        owner,
        request_id,
    )
    return row


async def create(
    connection: Connection,
    warehouse_id: uuid.UUID,
    owner: str,
    warehouse: warehouse_pb2.Warehouse,
    *,
    catalog_id: uuid.UUID,
    catalog_name: str,
    request_id: str | None,
    fingerprint: str,
) -> Record | None:
    """A new warehouse, ACTIVE; None when one with its id or owner's request_id exists."""
    storage = warehouse.storage
    row: Record | None = await connection.fetchrow(
        """
        INSERT INTO warehouses (
            warehouse_id, owner_user_id, display_name, catalog_warehouse_id,
            catalog_warehouse_name, bucket, key_prefix, region, endpoint,
            path_style_access, flavor, sts_enabled, sts_role_arn, state,
            create_request_id, request_fingerprint)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'ACTIVE', $14, $15)
        ON CONFLICT DO NOTHING
        RETURNING *
        """,
        warehouse_id,
        owner,
        warehouse.display_name,
        catalog_id,
        catalog_name,
        storage.bucket,
        storage.key_prefix.removesuffix("/"),
        storage.region,
        storage.endpoint,
        storage.path_style_access,
        FLAVOR_NAMES[storage.flavor],
        storage.sts_enabled,
        storage.sts_role_arn,
        request_id,
        fingerprint,
    )
    return row


async def not_being_deleted(connection: Connection) -> list[Record]:
    """The id and catalog id of every warehouse neither deleting nor deleted."""
    rows: list[Record] = await connection.fetch(
        "SELECT warehouse_id, catalog_warehouse_id FROM warehouses "
        "WHERE state NOT IN ('DELETING', 'DELETED')"
    )
    return rows


async def rotated(connection: Connection, warehouse_id: uuid.UUID, request_id: str) -> bool:
    """Whether the credential rotation with request_id is recorded already."""
    done = await connection.fetchval(
        "SELECT 1 FROM credential_rotations WHERE warehouse_id = $1 AND request_id = $2",
        warehouse_id,
        request_id,
    )
    return bool(done)


async def record_rotation(
    connection: Connection, warehouse_id: uuid.UUID, request_id: str
) -> int | None:
    """Records the rotation with request_id and answers the warehouse's next credential
    version; None when that rotation was recorded already."""
    version: int | None = await connection.fetchval(
        """
        INSERT INTO credential_rotations (warehouse_id, request_id, credential_version)
        SELECT warehouse_id, $2, credential_version + 1 FROM warehouses WHERE warehouse_id = $1
        ON CONFLICT DO NOTHING
        RETURNING credential_version
        """,
        warehouse_id,
        request_id,
    )
    return version


async def set_credential_version(
    connection: Connection, warehouse_id: uuid.UUID, version: int
) -> None:
    """Sets the warehouse's credential version."""
    await connection.execute(
        "UPDATE warehouses SET credential_version = $2, updated_at = now() WHERE warehouse_id = $1",
        warehouse_id,
        version,
    )


async def move(
    connection: Connection, warehouse_id: uuid.UUID, source: str, target: str
) -> Record | None:
    """The warehouse moved from state source to target; None if it was not in source."""
    moved: Record | None = await connection.fetchrow(
        "UPDATE warehouses SET state = $3, updated_at = now() "
        "WHERE warehouse_id = $1 AND state = $2 RETURNING *",
        warehouse_id,
        source,
        target,
    )
    return moved


async def move_from_any(
    connection: Connection, warehouse_id: uuid.UUID, target: str, sources: list[str]
) -> Record | None:
    """The warehouse moved from one of the states sources to target; None if it was in none."""
    moved: Record | None = await connection.fetchrow(
        "UPDATE warehouses SET state = $2, updated_at = now() "
        "WHERE warehouse_id = $1 AND state = ANY($3::text[]) RETURNING *",
        warehouse_id,
        target,
        sources,
    )
    return moved


async def mark_deleted(connection: Connection, warehouse_id: uuid.UUID) -> Record | None:
    """The warehouse moved to DELETED, from whatever state."""
    deleted: Record | None = await connection.fetchrow(
        "UPDATE warehouses SET state = 'DELETED', updated_at = now() WHERE warehouse_id = $1 RETURNING *",
        warehouse_id,
    )
    return deleted


async def lock_for_update(connection: Connection, warehouse_id: uuid.UUID) -> None:
    """Locks the warehouse's row FOR UPDATE until the transaction ends."""
    await connection.execute(
        "SELECT 1 FROM warehouses WHERE warehouse_id = $1 FOR UPDATE", warehouse_id
    )


async def unfinished_executions(connection: Connection, warehouse_id: uuid.UUID) -> int:
    """How many of the warehouse's executions are queued or running."""
    running: int = await connection.fetchval(
        "SELECT count(*) FROM executions WHERE warehouse_id = $1 AND state = ANY($2::text[])",
        warehouse_id,
        _UNFINISHED,
    )
    return running
