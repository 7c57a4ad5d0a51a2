"""What the catalog mode decides, decided once: the registry is built with its mode's rules
(rules_for), and its other modules ask the rules, never which mode runs.

- `per-user` (ModeRules): users register warehouses on their own buckets, share them, and read
  the executions of warehouses they hold a role on (see permissions);
- `global-rest` (GlobalRules): one platform warehouse in the REST catalog, which the registry
  makes at start; every user writes into it, nobody manages it through the API, and each user
  reads only the executions they submitted: with one warehouse for everyone, a role on the
  warehouse would be a role on everyone's results;
- `global-sql` (GlobalSqlRules): the same platform warehouse in pyiceberg's SQL catalog.
"""

from __future__ import annotations

import uuid

import grpc

from service_runtime.errors import Resource, ServiceError, not_found
from texera.lake.internal.v1 import registry_service_pb2
from warehouse_service import records
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.domain.permissions import Role
from warehouse_service.platform_warehouse import PLATFORM_WAREHOUSE_ID, platform_row
from warehouse_service.store import memberships
from warehouse_service.store.db import Connection, Record

#: ErrorInfo reason of a warehouse management call that the global modes do not have.
CATALOG_MODE_GLOBAL = "CATALOG_MODE_GLOBAL"


class ModeRules:
    """The per-user mode's rules."""

    mode = CatalogMode.PER_USER
    #: Whether an empty warehouse id names the platform warehouse (the only one).
    platform_by_default = False
    #: Whether a user reads only the executions they submitted (else: by warehouse role).
    submitter_only = False
    #: Whether the registry makes the platform warehouse in the REST catalog.
    platform_in_rest_catalog = False

    def refuse(self, method: str) -> None:
        """Raises FAILED_PRECONDITION (CATALOG_MODE_GLOBAL) if this mode has no `method`."""

    async def warehouse_as(
        self,
        connection: Connection,
        warehouse_id: str,
        user_id: str,
        needed: Role,
        *,
        lock: bool = False,
    ) -> tuple[Record, Role]:
        """The warehouse and user_id's role on it, if that allows `needed` (else NOT_FOUND or
        PERMISSION_DENIED, see permissions)."""
        return await memberships.warehouse_as(connection, warehouse_id, user_id, needed, lock=lock)

    async def role_on_execution(
        self, connection: Connection, warehouse_id: uuid.UUID, submitter: str, user_id: str
    ) -> Role:
        """user_id's role on an execution of warehouse_id that submitter submitted: the role
        on its warehouse."""
        return await memberships.role_on(connection, warehouse_id, user_id)

    def sql_binding(self, warehouse: Record) -> registry_service_pb2.CatalogBinding | None:
        """The binding of a warehouse in the SQL catalog; None where warehouses are in the
        REST catalog."""
        return None


class GlobalRules(ModeRules):
    """The global-rest mode's rules: the platform warehouse alone, its executions each its
    submitter's."""

    mode = CatalogMode.GLOBAL_REST
    platform_by_default = True
    submitter_only = True
    platform_in_rest_catalog = True

    def refuse(self, method: str) -> None:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{method} is not available: the mesh runs in catalog mode {self.mode.value}, where "
            "every execution goes to the one platform warehouse",
            reason=CATALOG_MODE_GLOBAL,
            metadata={"catalog_mode": self.mode.value, "method": method},
        )

    async def warehouse_as(
        self,
        connection: Connection,
        warehouse_id: str,
        user_id: str,
        needed: Role,
        *,
        lock: bool = False,
    ) -> tuple[Record, Role]:
        """Only the platform warehouse exists for users (an empty id names it), and everyone
        is its WRITER."""
        row = None
        if not warehouse_id or uuid.UUID(warehouse_id) == PLATFORM_WAREHOUSE_ID:
            row = await platform_row(connection, lock=lock)
        if row is None or needed > Role.WRITER:
            raise not_found(Resource.WAREHOUSE, warehouse_id or str(PLATFORM_WAREHOUSE_ID))
        return row, Role.WRITER

    async def role_on_execution(
        self, connection: Connection, warehouse_id: uuid.UUID, submitter: str, user_id: str
    ) -> Role:
        """Only its submitter has one (WRITER, as everyone on the platform warehouse)."""
        return Role.WRITER if submitter == user_id else Role.NONE


class GlobalSqlRules(GlobalRules):
    """The global-sql mode's rules: as global-rest, the platform warehouse in the SQL catalog."""

    mode = CatalogMode.GLOBAL_SQL
    platform_in_rest_catalog = False

    def sql_binding(self, warehouse: Record) -> registry_service_pb2.CatalogBinding | None:
        return records.binding(
            warehouse, "", "", None, backend=registry_service_pb2.CATALOG_BACKEND_SQL
        )


def rules_for(mode: CatalogMode) -> ModeRules:
    """The rules of a catalog mode."""
    rules = {
        CatalogMode.PER_USER: ModeRules,
        CatalogMode.GLOBAL_REST: GlobalRules,
        CatalogMode.GLOBAL_SQL: GlobalSqlRules,
    }
    return rules[mode]()
