"""The statements of the unit supervisor (warehouse_service.units.unit_supervisor): computing
units' launches, state changes, default units, deletion, and the checks of live and idle units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import asyncpg

from warehouse_service.store.db import Connection
from warehouse_service.store.leases import lease_lapsed


@dataclasses.dataclass(frozen=True)
class Condition:
    """What a unit's row must hold for a state change to apply: SQL following the unit's id,
    its parameters from $4 on."""

    sql: str = ""
    args: tuple[object, ...] = ()


#: Whatever state the unit is in.
ANY_STATE = Condition()
#: The unit is still being provisioned.
STILL_PROVISIONING = Condition("AND state = 'PROVISIONING'")


def still_in(state: str) -> Condition:
    """The unit is still in state."""
    return Condition("AND state = $4", (state,))


def still_idle(idle_seconds: float) -> Condition:
    """The unit still runs, unused for idle_seconds and with no unfinished executions."""
    return Condition(
        """
        AND state = 'RUNNING'
        AND last_used_at < now() - make_interval(secs => $4)
        AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.computing_unit_id = units.unit_id
                        AND e.state IN ('QUEUED', 'RUNNING'))
        """,
        (idle_seconds,),
    )


async def begin_launch(
    connection: Connection, unit_id: str, generation: str
) -> asyncpg.Record | None:
    """The PROVISIONING unit with its launch begun now, under generation and with no address
    yet; None when the unit is not PROVISIONING."""
    row: asyncpg.Record | None = await connection.fetchrow(
        "UPDATE units SET launched_at = now(), updated_at = now(), "
        "credential_generation = $2, launch_address = NULL "
        "WHERE unit_id = $1 AND state = 'PROVISIONING' RETURNING *",
        unit_id,
        generation,
    )
    return row


async def record_launch_address(
    connection: Connection, unit_id: str, generation: str, address: str | None
) -> None:
    """Where the unit's launch under generation serves (nothing if a later launch began)."""
    await connection.execute(
        "UPDATE units SET launch_address = $3 WHERE unit_id = $1 AND credential_generation = $2",
        unit_id,
        generation,
        address,
    )


async def restart(connection: Connection, unit_id: str) -> bool:
    """Moves a STOPPED or FAILED unit back to PROVISIONING, marked used now; whether it was
    one."""
    started = await connection.fetchval(
        "UPDATE units SET state = 'PROVISIONING', state_message = '', "
        "updated_at = now(), last_used_at = now() "
        "WHERE unit_id = $1 AND state IN ('STOPPED', 'FAILED') RETURNING unit_id",
        unit_id,
    )
    return started is not None


async def set_state(
    connection: Connection, unit_id: str, state: str, message: str, when: Condition
) -> bool:
    """Moves the unit to state with message if its row meets when, dropping its credential
    generation when the state is STOPPED or FAILED; whether it moved."""
    changed = await connection.fetchval(
        "UPDATE units SET state = $2, state_message = $3, updated_at = now(), "  # noqa: S608 - when is this module's SQL
        "credential_generation = CASE WHEN $2 IN ('STOPPED', 'FAILED') THEN NULL "
        "ELSE credential_generation END "
        f"WHERE unit_id = $1 {when.sql} RETURNING unit_id",
        unit_id,
        state,
        message,
        *when.args,
    )
    return changed is not None


async def default_unit(connection: Connection, user_id: str) -> str | None:
    """The user's default unit, unless there is none (or it was deleted)."""
    found = await connection.fetchval(
        "SELECT unit_id FROM units WHERE owner_user_id = $1 AND default_unit "
        "AND state <> 'DELETED'",
        user_id,
    )
    return None if found is None else str(found)


async def create_default(
    connection: Connection, unit_id: str, user_id: str, cores: int, memory_mib: int
) -> str | None:
    """A new default unit of the user, PROVISIONING; None when the user has one already."""
    created = await connection.fetchval(
        """
        INSERT INTO units (unit_id, owner_user_id, display_name, cores, memory_mib,
                           default_unit, state, request_fingerprint)
        VALUES ($1, $2, 'default', $3, $4, true, 'PROVISIONING', '')
        ON CONFLICT (owner_user_id) WHERE default_unit AND state <> 'DELETED' DO NOTHING
        RETURNING unit_id
        """,
        unit_id,
        user_id,
        cores,
        memory_mib,
    )
    return None if created is None else str(created)


async def lock(connection: Connection, unit_id: str) -> None:
    """Locks the unit's row FOR UPDATE until the transaction ends."""
    await connection.execute("SELECT 1 FROM units WHERE unit_id = $1 FOR UPDATE", unit_id)


async def unfinished_executions(connection: Connection, unit_id: str) -> list[str]:
    """The ids of the unit's QUEUED and RUNNING executions, in order."""
    return [
        row["execution_id"]
        for row in await connection.fetch(
            "SELECT execution_id FROM executions WHERE computing_unit_id = $1 "
            "AND state IN ('QUEUED', 'RUNNING') ORDER BY execution_id",
            unit_id,
        )
    ]


async def mark_deleting(connection: Connection, unit_id: str) -> None:
    await connection.execute(
        "UPDATE units SET state = 'DELETING', updated_at = now() WHERE unit_id = $1",
        unit_id,
    )


async def cancel_unfinished(connection: Connection, unit_id: str) -> None:
    """Cancels the unit's unfinished executions: the unit was deleted."""
    await connection.execute(
        """
        UPDATE executions SET state = 'CANCELLED', error_reason = 'COMPUTING_UNIT_DELETED',
            error_message = 'the computing unit was deleted', ended_at = now(),
            updated_at = now()
        WHERE computing_unit_id = $1 AND state IN ('QUEUED', 'RUNNING')
        """,
        unit_id,
    )


async def mark_deleted(connection: Connection, unit_id: str) -> None:
    """The unit DELETED: no longer its owner's default, its credential generation dropped."""
    await connection.execute(
        "UPDATE units SET state = 'DELETED', default_unit = false, updated_at = now(), "
        "credential_generation = NULL WHERE unit_id = $1",
        unit_id,
    )


async def live_units(
    connection: Connection, start_timeout_seconds: float
) -> Sequence[asyncpg.Record]:
    """The PROVISIONING and RUNNING units: unit_id, state, late (launched, or created, more
    than start_timeout_seconds ago) and registered (HEALTHY, its lease not lapsed)."""
    rows: Sequence[asyncpg.Record] = await connection.fetch(
        f"""
        SELECT u.unit_id, u.state,
               coalesce(u.launched_at, u.created_at)
                   < now() - make_interval(secs => $1) AS late,
               coalesce(r.state = 'HEALTHY' AND NOT {lease_lapsed("r.lease_expires_at")},
                        false) AS registered
        FROM units u LEFT JOIN computing_units r ON r.computing_unit_id = u.unit_id
        WHERE u.state IN ('PROVISIONING', 'RUNNING')
        """,  # noqa: S608 - lease_lapsed is constant SQL
        start_timeout_seconds,
    )
    return rows


async def idle_units(connection: Connection, idle_seconds: float) -> list[str]:
    """The ids of RUNNING units unused for idle_seconds, with no unfinished executions."""
    return [
        row["unit_id"]
        for row in await connection.fetch(
            """
            SELECT unit_id FROM units u
            WHERE state = 'RUNNING' AND last_used_at < now() - make_interval(secs => $1)
              AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.computing_unit_id = u.unit_id
                              AND e.state IN ('QUEUED', 'RUNNING'))
            """,
            idle_seconds,
        )
    ]
