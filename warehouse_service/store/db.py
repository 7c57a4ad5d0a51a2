"""The registry's connection pool: database outages become UNAVAILABLE, never a crash.

asyncpg's pool replaces broken connections by itself, so once the database is
back, the next call works again. While it is down, every call that needs it
answers UNAVAILABLE with ErrorInfo reason REGISTRY_DATABASE_UNAVAILABLE, which
callers (and the services relaying the answer) may retry, with their
request_id where the call changes something.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeAlias

import asyncpg
import grpc

from service_runtime.errors import ServiceError
from service_runtime.retry import RetryPolicy, retry_async
from warehouse_service.store.migrate import migrate

log = logging.getLogger("warehouse_service.store.db")

#: What a lost or unreachable database looks like to asyncpg.
DATABASE_DOWN = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.InterfaceError,
    # A connection whose server went away mid-query can be left in a broken protocol state.
    asyncpg.exceptions.InternalClientError,
)


#: A connection from the pool (generic only in the type stubs).
Connection: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
#: A row a statement answers, for modules outside the store that handle rows.
Record: TypeAlias = asyncpg.Record
#: A write that another, concurrent one of the same key won (a unique constraint refused it).
UniqueViolation: TypeAlias = asyncpg.UniqueViolationError


def present(row: asyncpg.Record | None) -> asyncpg.Record:
    """A row the statement is sure to return (RETURNING of a locked row, for example)."""
    if row is None:
        raise RuntimeError("a row the statement must return is missing")
    return row


#: The ErrorInfo reason of every answer the registry gives while its database is down.
DATABASE_UNAVAILABLE = "REGISTRY_DATABASE_UNAVAILABLE"


def unavailable() -> ServiceError:
    return ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        "the registry's database is unavailable; retry later",
        reason=DATABASE_UNAVAILABLE,
        retry_delay_seconds=2.0,
    )


class Database:
    def __init__(
        self, url: str, pool_size: int, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """ssl_context: TLS to the database (warehouse_service.store.db_tls); None: as url says."""
        self._url = url
        self._pool_size = pool_size
        self._ssl = ssl_context
        self._pool: asyncpg.Pool | None = None
        #: Calls that found the database unreachable since this process started: whoever must
        #: know whether it was unreachable meanwhile (the lease sweep) compares two readings.
        self.outages = 0

    async def open(self, *, retry_seconds: float = 2.0) -> None:
        """Creates the pool and applies migrations, waiting for the database if it is down."""
        self._pool = await asyncpg.create_pool(
            self._url,
            min_size=0,
            max_size=self._pool_size,
            command_timeout=30,
            timeout=5,
            ssl=self._ssl,
        )
        pool = self._pool

        async def migrated() -> None:
            async with pool.acquire() as connection:
                await migrate(connection)

        await retry_async(
            migrated,
            policy=RetryPolicy(
                window_seconds=math.inf,
                first_wait_seconds=retry_seconds,
                longest_wait_seconds=retry_seconds,
            ),
            transient=lambda error: isinstance(error, DATABASE_DOWN),
            what="reaching the database",
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        if self._pool is None:
            raise unavailable()
        try:
            connection = await self._pool.acquire(timeout=5)
        except DATABASE_DOWN as exc:
            self.outages += 1
            log.warning("no database connection", extra={"error": type(exc).__name__})
            raise unavailable() from exc
        try:
            yield connection
        except DATABASE_DOWN as exc:
            self.outages += 1
            log.warning("database call failed", extra={"error": type(exc).__name__})
            # Never hand a connection that saw an outage out again (unless the pool has already
            # taken it back, closed).
            with contextlib.suppress(asyncpg.InterfaceError):
                connection.terminate()
            raise unavailable() from exc
        finally:
            with contextlib.suppress(*DATABASE_DOWN):
                await self._pool.release(connection, timeout=5)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self.connection() as connection, connection.transaction():
            yield connection
