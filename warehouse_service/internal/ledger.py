"""ExecutionLedgerService: which execution writes into which warehouse, its state and outputs.

A computing unit calls with its own credential (its subject is the unit's id): it binds
executions for the user it serves (named in ``x-texera-on-behalf-of``, who must be allowed to
use the unit and own the warehouse or hold WRITER on it) and reports their states, each only
for itself and its own executions. Users read executions of warehouses they hold READER or more
on (see permissions).

A CatalogBinding answered to a service carries a read-only catalog token for its one warehouse;
one answered to a computing unit carries none (its executions reach the catalog through the
gatekeeper, see execution_credential_service).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

import grpc

from service_runtime.auth import Identity
from service_runtime.callers import (
    acting_for,
    require_unit,
)
from service_runtime.context import current_identity
from service_runtime.errors import (
    FieldViolations,
    Resource,
    ServiceError,
    failed_precondition,
    not_found,
)
from service_runtime.identifiers import check_identifier
from service_runtime.pagination import PageTokens, fingerprint, page_size
from texera.lake.internal.v1 import (
    registry_service_pb2,
    registry_service_pb2_grpc,
)
from warehouse_service import records
from warehouse_service.api.catalog_errors import catalog_refused_registry, catalog_unavailable
from warehouse_service.api.validation import (
    check_request_id,
    check_uuid,
)
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.domain.permissions import Role
from warehouse_service.domain.states import (
    CLEANED_UP_STATES,
    EXECUTION_STATE_NAMES,
    TERMINAL_STATES,
)
from warehouse_service.internal.registry_checks import ended, same_caller
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store import executions, warehouse_records
from warehouse_service.store.db import Connection, Database, Record, UniqueViolation, present
from warehouse_service.store.unit_records import usable_unit
from warehouse_service.units.unit_supervisor import USABLE_STATES, UnitSupervisor

log = logging.getLogger("warehouse_service.internal.ledger")

#: Where each state may go next; terminal states go nowhere.
_TRANSITIONS = {
    "QUEUED": {"QUEUED", "RUNNING", "FAILED", "CANCELLED"},
    "RUNNING": {"RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"},
}
_UNREADABLE = ("DELETING", "DELETED")


def _already_bound(execution_id: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.ALREADY_EXISTS,
        f"execution id {execution_id} is already used by another submission",
        reason="EXECUTION_ID_TAKEN",
    )


async def _execution_readable(
    connection: Connection, identity: Identity, row: Record, rules: ModeRules
) -> bool:
    """Whether the caller may see an execution: the gateway sees all, users those of
    warehouses they hold READER or more on (in a global mode: those they submitted), a
    computing unit acting as itself the executions bound to it."""
    if identity.is_service:
        return True
    if identity.is_unit:
        return bool(row["computing_unit_id"] == identity.user_id)
    if not identity.is_user:
        return False
    role = await rules.role_on_execution(
        connection, row["warehouse_id"], row["owner_user_id"], identity.user_id
    )
    return role >= Role.READER


class LedgerServicer(registry_service_pb2_grpc.ExecutionLedgerServiceServicer):
    def __init__(
        self,
        db: Database,
        catalog: CatalogClient,
        *,
        page_token_key: str,
        catalog_uri: str,
        project_id: str,
        supervisor: UnitSupervisor,
        rules: ModeRules | None = None,
    ) -> None:
        self._db = db
        self._rules = rules or ModeRules()
        self._catalog = catalog
        self._supervisor = supervisor
        self._catalog_uri = catalog_uri
        self._project_id = project_id
        self._execution_tokens = PageTokens(page_token_key, "executions")

    async def _binding(self, row: Record) -> registry_service_pb2.CatalogBinding:
        """How to reach the warehouse's catalog: for a service, with a fresh read-only token
        for it alone; for a computing unit, without a token (its executions reach the catalog
        through the gatekeeper, see OpenExecutionCatalog); global-sql: the SQL catalog, which
        takes no token."""
        if (sql := self._rules.sql_binding(row)) is not None:
            return sql
        identity = current_identity()
        if identity.is_unit or identity.via is not None:
            return records.binding(row, "", "", None)
        try:
            token = await self._catalog.warehouse_token(
                str(row["catalog_warehouse_id"]), write=False
            )
        except CatalogError as exc:
            raise catalog_refused_registry(exc) from exc
        except CatalogUnavailable as exc:
            raise catalog_unavailable(exc) from exc
        return records.binding(row, self._catalog_uri, self._project_id, token)

    # Executions ---------------------------------------------------------------------

    async def BindExecution(
        self, request: registry_service_pb2.BindExecutionRequest, context: Any
    ) -> registry_service_pb2.BindExecutionResponse:
        unit = require_unit()
        owner = acting_for().user_id
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        check_uuid(violations, request.warehouse_id, "warehouse_id")
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        violations.check(
            len(request.workflow_id) <= 128, "workflow_id", "must be at most 128 characters"
        )
        violations.check(
            len(request.workflow_fingerprint) <= 128,
            "workflow_fingerprint",
            "must be at most 128 characters",
        )
        check_request_id(violations, request.request_id)
        violations.raise_if_any()
        same_caller(unit, request.computing_unit_id)
        try:
            return await self._bind(owner, request)
        except UniqueViolation:
            # A concurrent bind of the same execution (or request) won the insert: answer as a replay.
            return await self._bind(owner, request)

    async def _bind(
        self, owner: str, request: registry_service_pb2.BindExecutionRequest
    ) -> registry_service_pb2.BindExecutionResponse:
        async with self._db.transaction() as connection:
            existing = await self._existing_bind(connection, owner, request)
            if existing is not None:
                return existing
            # Binds on one unit take turns: each later marks the unit used (an UPDATE of its
            # row), which two binds holding the row FOR SHARE would deadlock on.
            usable = await usable_unit(
                connection, request.computing_unit_id, owner, lock="FOR NO KEY UPDATE"
            )
            if usable is None or usable["state"] not in USABLE_STATES:
                raise not_found(Resource.COMPUTING_UNIT, request.computing_unit_id)
            warehouse, _ = await self._rules.warehouse_as(
                connection, request.warehouse_id, owner, Role.WRITER, lock=True
            )
            if warehouse["state"] != "ACTIVE":
                raise failed_precondition(
                    f"warehouse {request.warehouse_id} is {warehouse['state'].lower()} and accepts no executions",
                    reason=f"WAREHOUSE_{warehouse['state']}",
                )
            registration = await executions.registration(connection, request.computing_unit_id)
            if registration is None or registration["state"] != "HEALTHY":
                raise failed_precondition(
                    f"computing unit {request.computing_unit_id} is not registered or its lease lapsed",
                    reason="COMPUTING_UNIT_UNAVAILABLE",
                )
            # The unit binds before it runs anything: this holds even when the unit registered
            # anew, unconfined, since AcquireComputingUnit handed it out.
            self._supervisor.check_confined(usable, owner, registration["workers_confined"])
            row = await executions.bind(connection, owner, request)
            await executions.touch_unit(connection, request.computing_unit_id)
        log.info(
            "execution bound",
            extra={"execution_id": request.execution_id, "warehouse_id": request.warehouse_id},
        )
        return registry_service_pb2.BindExecutionResponse(
            execution=records.execution(present(row), []),
            binding=await self._binding(warehouse),
            created=True,
        )

    async def _existing_bind(
        self,
        connection: Connection,
        owner: str,
        request: registry_service_pb2.BindExecutionRequest,
    ) -> registry_service_pb2.BindExecutionResponse | None:
        """The answer for a bind that already happened, or None for a new one."""
        row = await executions.execution(connection, request.execution_id)
        if row is None and request.request_id:
            row = await executions.by_request(connection, owner, request.request_id.lower())
            if row is None:
                return None
        elif row is None:
            return None
        elif (
            row["owner_user_id"] != owner
            or str(row["warehouse_id"]) != request.warehouse_id.lower()
            or (
                request.workflow_fingerprint
                and row["workflow_fingerprint"] != request.workflow_fingerprint
            )
        ):
            raise _already_bound(request.execution_id)
        warehouse = await warehouse_records.warehouse(connection, row["warehouse_id"])
        return registry_service_pb2.BindExecutionResponse(
            execution=records.execution(
                row, await executions.outputs(connection, row["execution_id"])
            ),
            binding=await self._binding(present(warehouse)),
            created=False,
        )

    async def UpdateExecutionState(
        self, request: registry_service_pb2.UpdateExecutionStateRequest, context: Any
    ) -> registry_service_pb2.UpdateExecutionStateResponse:
        identity = require_unit()
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        state = EXECUTION_STATE_NAMES.get(request.state)
        violations.check(
            request.state == 0 or state is not None,
            "state",
            f"{request.state} is not an execution state",
        )
        if state in ("FAILED", "CANCELLED"):
            violations.check(
                bool(request.error.reason), "error.reason", f"is required with {state}"
            )
        for index, output in enumerate(request.outputs):
            violations.check(
                bool(output.operator_id), f"outputs[{index}].operator_id", "is required"
            )
            violations.check(bool(output.table_name), f"outputs[{index}].table_name", "is required")
        violations.raise_if_any()
        same_caller(identity, request.computing_unit_id)

        async with self._db.transaction() as connection:
            row = await executions.execution(connection, request.execution_id, for_update=True)
            if row is None:
                raise not_found(Resource.EXECUTION, request.execution_id)
            if row["computing_unit_id"] != request.computing_unit_id:
                raise ServiceError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"execution {request.execution_id} runs on another computing unit",
                )
            current = row["state"]
            target = state or current
            if current in TERMINAL_STATES:
                if target != current:
                    raise ended(request.execution_id, current)
            elif target not in _TRANSITIONS[current]:
                raise failed_precondition(
                    f"an execution cannot go from {current.lower()} to {target.lower()}",
                    reason="BAD_TRANSITION",
                )
            else:
                row = await self._apply(connection, request, row, target)
                await executions.touch_unit(connection, request.computing_unit_id)
            outputs = await executions.outputs(connection, request.execution_id)
        return registry_service_pb2.UpdateExecutionStateResponse(
            execution=records.execution(row, outputs)
        )

    async def _apply(
        self,
        connection: Connection,
        request: registry_service_pb2.UpdateExecutionStateRequest,
        row: Record,
        target: str,
    ) -> Record:
        updated = await executions.move(connection, row["execution_id"], target, request)
        if request.outputs and target not in CLEANED_UP_STATES:
            await executions.replace_outputs(connection, row["execution_id"], request.outputs)
        if target != row["state"]:
            log.info(
                "execution state changed",
                extra={"execution_id": row["execution_id"], "from": row["state"], "to": target},
            )
        return present(updated)

    async def ResolveExecution(
        self, request: registry_service_pb2.ResolveExecutionRequest, context: Any
    ) -> registry_service_pb2.ResolveExecutionResponse:
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        violations.raise_if_any()
        identity = current_identity()
        async with self._db.connection() as connection:
            row = await executions.execution(connection, request.execution_id)
            if row is None or not await _execution_readable(connection, identity, row, self._rules):
                raise not_found(Resource.EXECUTION, request.execution_id)
            warehouse = present(await warehouse_records.warehouse(connection, row["warehouse_id"]))
            if warehouse["state"] in _UNREADABLE:
                raise not_found(Resource.EXECUTION, request.execution_id)
            outputs = await executions.outputs(connection, request.execution_id)
        return registry_service_pb2.ResolveExecutionResponse(
            execution=records.execution(row, outputs),
            binding=await self._binding(warehouse),
        )

    async def ResolveWarehouse(
        self, request: registry_service_pb2.ResolveWarehouseRequest, context: Any
    ) -> registry_service_pb2.ResolveWarehouseResponse:
        identity = current_identity()
        violations = FieldViolations()
        # In a global mode a user's empty id names the platform warehouse.
        if request.warehouse_id or not (self._rules.platform_by_default and identity.is_user):
            check_uuid(violations, request.warehouse_id, "warehouse_id")
        violations.raise_if_any()
        async with self._db.connection() as connection:
            row = await self._resolvable(connection, identity, request.warehouse_id)
        if row["state"] in _UNREADABLE:
            raise not_found(Resource.WAREHOUSE, request.warehouse_id)
        return registry_service_pb2.ResolveWarehouseResponse(binding=await self._binding(row))

    async def _resolvable(
        self, connection: Connection, identity: Identity, warehouse_id: str
    ) -> Record:
        """The warehouse, if the caller may reach it: services every one; a user one it holds
        READER or more on, and WRITER or more through a computing unit; a unit acting as itself
        none (its executions renew their catalog access through OpenExecutionCatalog)."""
        if identity.is_user:
            needed = Role.WRITER if identity.via is not None else Role.READER
            shared, _ = await self._rules.warehouse_as(
                connection, warehouse_id, identity.user_id, needed
            )
            return shared
        row = await warehouse_records.warehouse(connection, uuid.UUID(warehouse_id))
        if row is None or not identity.is_service:
            raise not_found(Resource.WAREHOUSE, warehouse_id)
        return row

    async def ListExecutionRecords(
        self, request: registry_service_pb2.ListExecutionRecordsRequest, context: Any
    ) -> registry_service_pb2.ListExecutionRecordsResponse:
        owner = acting_for().user_id
        limit = page_size(request.page_size, default=50, maximum=500)
        violations = FieldViolations()
        if request.warehouse_id:
            check_uuid(violations, request.warehouse_id, "warehouse_id")
        if request.computing_unit_id:
            check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        states = sorted(
            EXECUTION_STATE_NAMES[s] for s in request.states if s in EXECUTION_STATE_NAMES
        )
        violations.check(
            len(states) == len(request.states), "states", "must all be execution states"
        )
        violations.raise_if_any()
        request_fingerprint = fingerprint(
            owner, request.warehouse_id, states, request.computing_unit_id
        )
        before: tuple[datetime | None, str | None] = (None, None)
        if request.page_token:
            position = self._execution_tokens.read(request.page_token, request_fingerprint)
            before = (datetime.fromisoformat(position["t"]), position["id"])
        async with self._db.connection() as connection:
            rows = await executions.readable_page(
                connection,
                owner,
                warehouse_id=uuid.UUID(request.warehouse_id) if request.warehouse_id else None,
                states=states,
                unit_id=request.computing_unit_id or None,
                before=before,
                limit=limit + 1,
                submitter_only=self._rules.submitter_only,
            )
            page = rows[:limit]
            listed = [
                records.execution(row, await executions.outputs(connection, row["execution_id"]))
                for row in page
            ]
        token = ""
        if len(rows) > limit:
            last = page[-1]
            token = self._execution_tokens.issue(
                {"t": last["created_at"].isoformat(), "id": last["execution_id"]},
                request_fingerprint,
            )
        return registry_service_pb2.ListExecutionRecordsResponse(
            executions=listed, next_page_token=token
        )
