"""Applies the registry's migrations at start-up, safely when replicas start at once.

Each migrations/NNNN_name.sql runs once, in order, in its own transaction,
and is recorded in schema_migrations. A session advisory lock serializes
replicas: the second one waits, then finds nothing left to apply.
"""

from __future__ import annotations

import logging
from importlib import resources

import asyncpg

log = logging.getLogger("warehouse_service.store.migrate")
_LOCK_KEY = 7_400_100  # any constant shared by all replicas


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every migration, in order."""
    found = []
    for entry in resources.files("warehouse_service.store.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version, _, name = entry.name.removesuffix(".sql").partition("_")
            found.append((int(version), name, entry.read_text()))
    return sorted(found)


async def migrate(connection: asyncpg.pool.PoolConnectionProxy[asyncpg.Record]) -> list[int]:
    """Applies what is missing; returns the versions applied now."""
    await connection.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {
            row["version"]
            for row in await connection.fetch("SELECT version FROM schema_migrations")
        }
        done = []
        for version, name, sql in migrations():
            if version in applied:
                continue
            async with connection.transaction():
                await connection.execute(sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name
                )
            log.info("applied migration", extra={"version": version, "migration": name})
            done.append(version)
        return done
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
