"""WarehouseService: the caller's warehouses, created in and deleted from the catalog, and
shared with other users (see permissions for who may do what).

Credentials pass through to the catalog and are dropped; the database keeps
the catalog's warehouse id and non-secret metadata only. The catalog call
happens before the row is written, so a failed create leaves no row. With a
request_id the warehouse id, and with it the catalog's warehouse name, is
derived from (owner, request_id): a retry after an answer that was lost finds
the catalog's warehouse by that name and adopts it instead of creating another.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import grpc

from catalog_map.platform import PLATFORM_OWNER
from service_runtime.callers import require_user
from service_runtime.config import ENV_PREFIX, ConfigError
from service_runtime.endpoint_guard import EndpointGuard
from service_runtime.errors import (
    FieldViolation,
    FieldViolations,
    Resource,
    ServiceError,
    invalid_argument,
    not_found,
)
from service_runtime.pagination import PageTokens, fingerprint, page_size
from texera.lake.v1 import (
    usage_pb2,
    warehouse_pb2,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)
from warehouse_service import platform_warehouse, records
from warehouse_service.api import usage
from warehouse_service.api.catalog_errors import (
    ENDPOINT_FIELD,
    OVERLAP,
    catalog_delete_failure,
    catalog_failure,
    catalog_refused_registry,
    catalog_unavailable,
)
from warehouse_service.api.validation import (
    check_credentials,
    check_display_name,
    check_member,
    check_request_id,
    check_storage,
    check_user_id,
    check_uuid,
)
from warehouse_service.background import leftover_tables
from warehouse_service.catalog import catalog_purge, delete_profile
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.domain.permissions import GRANTABLE, Role, role_of
from warehouse_service.domain.states import WAREHOUSE_STATE_NAMES
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store import (
    memberships,
    retention_store,
    usage_repository,
    warehouse_records,
)
from warehouse_service.store.db import Database, Record, present

log = logging.getLogger("warehouse_service.api.warehouses")
_ID_NAMESPACE = uuid.UUID("6b1b8f0e-4f7e-4a8e-9c1e-2f3d4c5b6a70")
#: How long a storage endpoint's host name may take to resolve.
_RESOLVE_SECONDS = 5.0


def catalog_name(warehouse_id: str) -> str:
    """The warehouse's name in the catalog."""
    return f"texera-{warehouse_id}"


def derived_warehouse_id(owner: str, request_id: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{owner}\n{request_id.lower()}"))


def _require_state(row: Record, state: str) -> None:
    if row["state"] != state:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the warehouse is {row['state'].lower()}, not {state.lower()}",
            reason="WAREHOUSE_STATE",
        )


def _require_not_deleted(row: Record) -> None:
    if row["state"] in ("DELETING", "DELETED"):
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            "the warehouse is being deleted",
            reason="WAREHOUSE_DELETED",
        )


def _fingerprint(warehouse: warehouse_pb2.Warehouse) -> str:
    content = warehouse_pb2.Warehouse(
        display_name=warehouse.display_name, storage=warehouse.storage
    )
    return hashlib.sha256(content.SerializeToString(deterministic=True)).hexdigest()


def _state_names(states: Any) -> list[str]:
    return [WAREHOUSE_STATE_NAMES[s] for s in states if s in WAREHOUSE_STATE_NAMES]


class WarehouseServicer(warehouse_service_pb2_grpc.WarehouseServiceServicer):
    def __init__(
        self,
        db: Database,
        catalog: CatalogClient,
        page_token_key: str,
        *,
        delete_wait_seconds: float = 60.0,
        endpoint_guard: EndpointGuard | None = None,
        rules: ModeRules | None = None,
    ) -> None:
        self._db = db
        self._rules = rules or ModeRules()
        self._guard = endpoint_guard or EndpointGuard()
        self._catalog = catalog
        self._tokens = PageTokens(page_token_key, "warehouses")
        self._member_tokens = PageTokens(page_token_key, "warehouse-members")
        self._delete_wait = delete_wait_seconds

    async def _as_user(self, user: str, warehouse_id: str, needed: Role) -> tuple[Record, Role]:
        """The warehouse and the user's role on it, if that allows `needed`."""
        violations = FieldViolations()
        if warehouse_id or not self._rules.platform_by_default:
            check_uuid(violations, warehouse_id, "warehouse_id")
        violations.raise_if_any()
        async with self._db.connection() as connection:
            return await self._rules.warehouse_as(connection, warehouse_id, user, needed)

    async def _owned(self, owner: str, warehouse_id: str) -> Record:
        row, _ = await self._as_user(owner, warehouse_id, Role.OWNER)
        return row

    async def CreateWarehouse(
        self, request: warehouse_service_pb2.CreateWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.CreateWarehouseResponse:
        owner = require_user().user_id
        self._rules.refuse("CreateWarehouse")
        violations = FieldViolations()
        check_display_name(violations, request.warehouse.display_name, "warehouse.display_name")
        if request.warehouse.HasField("storage"):
            check_storage(violations, request.warehouse.storage, "warehouse.storage")
        else:
            violations.add("warehouse.storage", "is required")
        check_credentials(violations, request)
        check_request_id(violations, request.request_id)
        violations.raise_if_any()
        await self._check_endpoint(request.warehouse.storage.endpoint)

        row = await self._create(owner, request)
        return warehouse_service_pb2.CreateWarehouseResponse(
            warehouse=records.warehouse(row, Role.OWNER)
        )

    async def create_platform(self, request: warehouse_service_pb2.CreateWarehouseRequest) -> None:
        """Creates the platform warehouse of a global mode, or finds it made already; in the
        REST catalog unless the mode is global-sql (whose SQL catalog needs no warehouse)."""
        try:
            row = await self._create(
                PLATFORM_OWNER,
                request,
                str(platform_warehouse.PLATFORM_WAREHOUSE_ID),
                in_catalog=self._rules.platform_in_rest_catalog,
            )
        except ServiceError as exc:
            if not any(v.field == "request_id" for v in exc.violations):
                raise
            # The warehouse exists with another place or name: the settings changed.
            raise ConfigError(
                "the platform warehouse exists with other storage than the "
                f"{ENV_PREFIX}PLATFORM_* settings name now; set them back ({exc.message})"
            ) from exc
        log.info("platform warehouse ready", extra={"warehouse_id": str(row["warehouse_id"])})

    async def _create(
        self,
        owner: str,
        request: warehouse_service_pb2.CreateWarehouseRequest,
        warehouse_id: str = "",
        *,
        in_catalog: bool = True,
    ) -> Record:
        content = _fingerprint(request.warehouse)
        if request.request_id and (earlier := await self._created_by(owner, request.request_id)):
            if earlier["request_fingerprint"] != content:
                raise invalid_argument(
                    [FieldViolation("request_id", "was already used for a different warehouse")]
                )
            return earlier
        warehouse_id = warehouse_id or (
            derived_warehouse_id(owner, request.request_id)
            if request.request_id
            else str(uuid.uuid4())
        )
        name = catalog_name(warehouse_id)
        catalog_id = warehouse_id
        if in_catalog:
            created = await self._create_in_catalog(name, request)
            catalog_id = created.get("warehouse-id") or created["id"]
            await self._grant_reader(catalog_id)
        row = await self._insert(owner, warehouse_id, catalog_id, request, content)
        log.info(
            "warehouse created",
            extra={"warehouse_id": warehouse_id, "catalog_warehouse_id": catalog_id},
        )
        return row

    async def _check_endpoint(self, endpoint: str) -> None:
        """Refuses a storage endpoint that points inside the platform (names are resolved)."""
        if not endpoint:  # AWS's endpoint of the region
            return
        try:
            problem = await asyncio.wait_for(
                asyncio.to_thread(self._guard.problem, endpoint), _RESOLVE_SECONDS
            )
        except TimeoutError:
            problem = "its host name does not resolve in time"
        if problem:
            raise invalid_argument(
                [FieldViolation(ENDPOINT_FIELD, f"is not an allowed storage endpoint: {problem}")]
            )

    async def _created_by(self, owner: str, request_id: str) -> Record | None:
        async with self._db.connection() as connection:
            return await warehouse_records.by_request(connection, owner, request_id.lower())

    async def _create_in_catalog(
        self, name: str, request: warehouse_service_pb2.CreateWarehouseRequest
    ) -> dict[str, Any]:
        storage = request.warehouse.storage
        try:
            return await self._catalog.create_warehouse(name, storage, request.credentials)
        except CatalogError as exc:
            if exc.status == 409 or exc.error_type == OVERLAP:
                # Perhaps our own earlier attempt, whose answer was lost: adopt it.
                found = await self._adoptable(name, storage)
                if found is not None:
                    return found
            raise catalog_failure(exc, request.credentials) from exc
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc

    async def _grant_reader(self, catalog_id: str) -> None:
        """Lets the catalog's reader client read the new warehouse (a retry of the creation,
        which adopts the catalog's warehouse, grants again)."""
        try:
            await self._catalog.grant_reader(catalog_id)
        except CatalogError as exc:
            raise catalog_refused_registry(exc) from exc
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc

    async def _adoptable(
        self, name: str, storage: warehouse_pb2.S3StorageProfile
    ) -> dict[str, Any] | None:
        try:
            found = await self._catalog.find_warehouse(name)
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc
        if found is None:
            return None
        profile = found["storage-profile"]
        same_place = profile.get("bucket") == storage.bucket and (
            profile.get("key-prefix") or ""
        ) == (storage.key_prefix.removesuffix("/"))
        if not same_place:
            raise invalid_argument(
                [FieldViolation("request_id", "was already used for a different warehouse")]
            )
        return found

    async def _insert(
        self,
        owner: str,
        warehouse_id: str,
        catalog_id: str,
        request: warehouse_service_pb2.CreateWarehouseRequest,
        content: str,
    ) -> Record:
        async with self._db.transaction() as connection:
            row = await warehouse_records.create(
                connection,
                uuid.UUID(warehouse_id),
                owner,
                request.warehouse,
                catalog_id=uuid.UUID(catalog_id),
                catalog_name=catalog_name(warehouse_id),
                request_id=request.request_id.lower() or None,
                fingerprint=content,
            )
            if row is None:  # a concurrent retry of the same request wrote it first
                row = await warehouse_records.warehouse(connection, uuid.UUID(warehouse_id))
        assert row is not None
        return row

    async def GetWarehouse(
        self, request: warehouse_service_pb2.GetWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.GetWarehouseResponse:
        row, role = await self._as_user(require_user().user_id, request.warehouse_id, Role.READER)
        return warehouse_service_pb2.GetWarehouseResponse(warehouse=records.warehouse(row, role))

    async def ListWarehouses(
        self, request: warehouse_service_pb2.ListWarehousesRequest, context: Any
    ) -> warehouse_service_pb2.ListWarehousesResponse:
        caller = require_user().user_id
        limit = page_size(request.page_size, default=50, maximum=500)
        violations = FieldViolations()
        for state in request.states:
            violations.check(
                state in WAREHOUSE_STATE_NAMES,
                "states",
                f"{state} is not a warehouse state",
            )
        violations.raise_if_any()
        states = sorted(_state_names(request.states) or ["ACTIVE", "ARCHIVED", "DELETING"])
        if self._rules.platform_by_default:  # the platform warehouse is the only one
            row, role = await self._as_user(caller, "", Role.WRITER)
            shown = [records.warehouse(row, role)] if row["state"] in states else []
            return warehouse_service_pb2.ListWarehousesResponse(warehouses=shown)
        request_fingerprint = fingerprint(caller, states)
        after: tuple[datetime | None, uuid.UUID | None] = (None, None)
        if request.page_token:
            position = self._tokens.read(request.page_token, request_fingerprint)
            after = (datetime.fromisoformat(position["t"]), uuid.UUID(position["id"]))
        async with self._db.connection() as connection:
            rows = await memberships.visible_warehouses(
                connection, caller, states, after, limit + 1
            )
        page, more = rows[:limit], len(rows) > limit
        token = ""
        if more:
            last = page[-1]
            token = self._tokens.issue(
                {"t": last["created_at"].isoformat(), "id": str(last["warehouse_id"])},
                request_fingerprint,
            )
        return warehouse_service_pb2.ListWarehousesResponse(
            warehouses=[
                records.warehouse(row, role_of(caller, row["owner_user_id"], row["granted_role"]))
                for row in page
            ],
            next_page_token=token,
        )

    async def RotateWarehouseCredentials(
        self, request: warehouse_service_pb2.RotateWarehouseCredentialsRequest, context: Any
    ) -> warehouse_service_pb2.RotateWarehouseCredentialsResponse:
        self._rules.refuse("RotateWarehouseCredentials")
        owner = require_user().user_id
        violations = FieldViolations()
        check_uuid(violations, request.warehouse_id, "warehouse_id")
        check_credentials(violations, request)
        check_request_id(violations, request.request_id)
        violations.raise_if_any()
        row = await self._owned(owner, request.warehouse_id)
        _require_not_deleted(row)
        await self._check_endpoint(row["endpoint"])
        request_id = request.request_id.lower() or str(uuid.uuid4())
        async with self._db.connection() as connection:
            done = await warehouse_records.rotated(connection, row["warehouse_id"], request_id)
        if not done:
            try:
                await self._catalog.update_credential(
                    str(row["catalog_warehouse_id"]), request.credentials
                )
            except CatalogError as exc:
                raise catalog_failure(exc, request.credentials) from exc
            except CatalogUnavailable as exc:
                raise catalog_unavailable(exc) from exc
            row = await self._record_rotation(row["warehouse_id"], request_id)
        else:
            row = await self._owned(owner, request.warehouse_id)
        log.info("credentials rotated", extra={"warehouse_id": request.warehouse_id})
        return warehouse_service_pb2.RotateWarehouseCredentialsResponse(
            warehouse=records.warehouse(row, Role.OWNER)
        )

    async def _record_rotation(self, warehouse_id: uuid.UUID, request_id: str) -> Record:
        async with self._db.transaction() as connection:
            version = await warehouse_records.record_rotation(connection, warehouse_id, request_id)
            if version is not None:
                await warehouse_records.set_credential_version(connection, warehouse_id, version)
            return present(await warehouse_records.warehouse(connection, warehouse_id))

    async def _in_catalog(self, step: Callable[[str], Awaitable[None]], row: Record) -> None:
        try:
            await step(str(row["catalog_warehouse_id"]))
        except CatalogError as exc:
            raise catalog_failure(exc) from exc
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc

    async def _set_state(self, warehouse_id: uuid.UUID, source: str, target: str) -> Record | None:
        """The warehouse moved from state source to target; None if it was not in source."""
        async with self._db.connection() as connection:
            return await warehouse_records.move(connection, warehouse_id, source, target)

    async def _move(self, warehouse_id: str, source: str, target: str) -> Record:
        """The caller's warehouse moved from state source to target; already in target is a
        no-op."""
        row = await self._owned(require_user().user_id, warehouse_id)
        if row["state"] == target:
            return row
        _require_state(row, source)
        moved = await self._set_state(row["warehouse_id"], source, target)
        # None: it changed meanwhile; answer from its current state.
        return moved if moved is not None else await self._move(warehouse_id, source, target)

    async def ArchiveWarehouse(
        self, request: warehouse_service_pb2.ArchiveWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.ArchiveWarehouseResponse:
        """New executions are refused; running ones finish, and every result stays readable.
        The catalog's warehouse stays active: Lakekeeper answers no client call on an inactive
        warehouse, reads included."""
        self._rules.refuse("ArchiveWarehouse")
        row = await self._move(request.warehouse_id, "ACTIVE", "ARCHIVED")
        return warehouse_service_pb2.ArchiveWarehouseResponse(
            warehouse=records.warehouse(row, Role.OWNER)
        )

    async def RestoreWarehouse(
        self, request: warehouse_service_pb2.RestoreWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.RestoreWarehouseResponse:
        self._rules.refuse("RestoreWarehouse")
        row = await self._move(request.warehouse_id, "ARCHIVED", "ACTIVE")
        return warehouse_service_pb2.RestoreWarehouseResponse(
            warehouse=records.warehouse(row, Role.OWNER)
        )

    async def DeleteWarehouse(
        self, request: warehouse_service_pb2.DeleteWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.DeleteWarehouseResponse:
        self._rules.refuse("DeleteWarehouse")
        owner = require_user().user_id
        try:
            row = await self._owned(owner, request.warehouse_id)
        except ServiceError as exc:
            if request.allow_missing and exc.code == grpc.StatusCode.NOT_FOUND:
                return warehouse_service_pb2.DeleteWarehouseResponse()
            raise
        if row["state"] == "DELETED":
            if request.allow_missing:
                return warehouse_service_pb2.DeleteWarehouseResponse(
                    warehouse=records.warehouse(row, Role.OWNER)
                )
            raise not_found(Resource.WAREHOUSE, request.warehouse_id)
        try:
            name, catalog_id = row["catalog_warehouse_name"], str(row["catalog_warehouse_id"])
            contents = await catalog_purge.contents(self._catalog, name, catalog_id)
            tables = await self._contents_kept(row["warehouse_id"], name, contents)
            if tables and not request.purge:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the warehouse holds {tables} table(s); delete it with purge to drop them and their data",
                    reason="WAREHOUSE_NOT_EMPTY",
                )
            await self._stop_writes(
                row["warehouse_id"], "DELETING", ("ACTIVE", "ARCHIVED", "DELETING")
            )
            if contents:  # what it drops must be gone at once for the warehouse to go
                await self._catalog.set_delete_profile(catalog_id, delete_profile.HARD)
            await catalog_purge.empty(self._catalog, name, contents)
            await catalog_purge.delete(self._catalog, catalog_id, self._delete_wait)
        except CatalogError as exc:
            raise catalog_delete_failure(exc) from exc
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc
        async with self._db.transaction() as connection:
            deleted = await warehouse_records.mark_deleted(connection, row["warehouse_id"])
            # Its tables are gone: its executions store nothing any more.
            await usage_repository.schedule_warehouse(connection, row["warehouse_id"])
        log.info(
            "warehouse deleted",
            extra={"warehouse_id": request.warehouse_id, "purge": request.purge},
        )
        return warehouse_service_pb2.DeleteWarehouseResponse(
            warehouse=records.warehouse(present(deleted), Role.OWNER)
        )

    async def _contents_kept(
        self, warehouse_id: uuid.UUID, name: str, contents: catalog_purge.Contents
    ) -> int:
        """How many listed tables are the warehouse's contents: not counting those the cleaner
        drops anyway (see leftover_tables)."""
        if not any(contents.values()):
            return 0
        async with self._db.connection() as connection:
            removing = await retention_store.executions_being_removed(connection, warehouse_id)
        prefix = await self._catalog.prefix(name)
        return await leftover_tables.kept(self._catalog, prefix, contents, removing)

    async def _stop_writes(
        self, warehouse_id: uuid.UUID, target: str, sources: tuple[str, ...]
    ) -> Record | None:
        """The warehouse moved from one of sources to target, unless executions still run in it;
        binds lock the row, so none can slip in. None if it was in none of sources."""
        async with self._db.transaction() as connection:
            await warehouse_records.lock_for_update(connection, warehouse_id)
            running = await warehouse_records.unfinished_executions(connection, warehouse_id)
            if running:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{running} execution(s) still write into the warehouse; cancel them first",
                    reason="WAREHOUSE_IN_USE",
                )
            return await warehouse_records.move_from_any(
                connection, warehouse_id, target, list(sources)
            )

    # Sharing --------------------------------------------------------------------------

    async def ShareWarehouse(
        self, request: warehouse_service_pb2.ShareWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.ShareWarehouseResponse:
        self._rules.refuse("ShareWarehouse")
        owner = require_user().user_id
        violations = FieldViolations()
        check_uuid(violations, request.warehouse_id, "warehouse_id")
        check_member(violations, request.member, "member")
        violations.raise_if_any()
        row = await self._owned(owner, request.warehouse_id)
        if request.member.user_id == row["owner_user_id"]:
            raise invalid_argument(
                [
                    FieldViolation(
                        "member.user_id", "is the warehouse's owner, who holds every right"
                    )
                ]
            )
        _require_not_deleted(row)
        role = GRANTABLE[request.member.role]
        async with self._db.connection() as connection:
            granted = await memberships.grant(
                connection, row["warehouse_id"], request.member.user_id, role, owner
            )
        log.info(
            "warehouse shared",
            extra={
                "warehouse_id": request.warehouse_id,
                "other_user_id": request.member.user_id,
                "role": role.name,
            },
        )
        return warehouse_service_pb2.ShareWarehouseResponse(member=records.member(granted))

    async def UnshareWarehouse(
        self, request: warehouse_service_pb2.UnshareWarehouseRequest, context: Any
    ) -> warehouse_service_pb2.UnshareWarehouseResponse:
        self._rules.refuse("UnshareWarehouse")
        owner = require_user().user_id
        violations = FieldViolations()
        check_uuid(violations, request.warehouse_id, "warehouse_id")
        check_user_id(violations, request.user_id, "user_id")
        violations.raise_if_any()
        row = await self._owned(owner, request.warehouse_id)
        async with self._db.connection() as connection:
            await memberships.revoke(connection, row["warehouse_id"], request.user_id)
        log.info(
            "warehouse unshared",
            extra={"warehouse_id": request.warehouse_id, "other_user_id": request.user_id},
        )
        return warehouse_service_pb2.UnshareWarehouseResponse()

    async def ListWarehouseMembers(
        self, request: warehouse_service_pb2.ListWarehouseMembersRequest, context: Any
    ) -> warehouse_service_pb2.ListWarehouseMembersResponse:
        self._rules.refuse("ListWarehouseMembers")
        owner = require_user().user_id
        limit = page_size(request.page_size, default=50, maximum=500)
        row = await self._owned(owner, request.warehouse_id)
        request_fingerprint = fingerprint(owner, request.warehouse_id.lower())
        after = ""
        if request.page_token:
            after = self._member_tokens.read(request.page_token, request_fingerprint)["user"]
        async with self._db.connection() as connection:
            rows = await memberships.members(connection, row["warehouse_id"], after, limit + 1)
        page = rows[:limit]
        token = ""
        if len(rows) > limit:
            token = self._member_tokens.issue({"user": page[-1]["user_id"]}, request_fingerprint)
        return warehouse_service_pb2.ListWarehouseMembersResponse(
            members=[records.member(member) for member in page], next_page_token=token
        )

    # Usage ----------------------------------------------------------------------------

    async def GetWarehouseUsage(
        self, request: usage_pb2.GetWarehouseUsageRequest, context: Any
    ) -> usage_pb2.GetWarehouseUsageResponse:
        self._rules.refuse("GetWarehouseUsage")
        return usage_pb2.GetWarehouseUsageResponse(
            warehouse_usage=await usage.warehouse_usage(self._db, request.warehouse_id)
        )

    async def GetExecutionUsage(
        self, request: usage_pb2.GetExecutionUsageRequest, context: Any
    ) -> usage_pb2.GetExecutionUsageResponse:
        return usage_pb2.GetExecutionUsageResponse(
            execution_usage=await usage.execution_usage(self._db, self._rules, request.execution_id)
        )
