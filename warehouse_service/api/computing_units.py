"""ComputingUnitService: users' own computing units, and whom they are shared with.

Every method is scoped to the caller: a unit the caller neither owns nor was
given answers NOT_FOUND; changing a unit (delete, share) is its owner's alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import grpc

from service_runtime.callers import require_user
from service_runtime.errors import (
    FieldViolation,
    FieldViolations,
    Resource,
    ServiceError,
    invalid_argument,
    not_found,
)
from service_runtime.identifiers import check_identifier
from service_runtime.pagination import PageTokens, fingerprint, page_size
from texera.lake.v1 import computing_unit_service_pb2, computing_unit_service_pb2_grpc
from warehouse_service import records
from warehouse_service.api.validation import (
    check_display_name,
    check_request_id,
    check_user_id,
)
from warehouse_service.store import unit_records
from warehouse_service.store.db import Connection, Database, Record, present
from warehouse_service.units.unit_supervisor import UnitSupervisor, new_unit_id

log = logging.getLogger("warehouse_service.api.computing_units")
cus = computing_unit_service_pb2
MAX_CORES = 64
MEMORY_MIB = (512, 262_144)


def _owner_only(unit_id: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.PERMISSION_DENIED,
        f"only the owner of computing unit {unit_id} may change it",
    )


class ComputingUnitServicer(computing_unit_service_pb2_grpc.ComputingUnitServiceServicer):
    def __init__(self, db: Database, supervisor: UnitSupervisor, page_token_key: str) -> None:
        self._db = db
        self._supervisor = supervisor
        self._page_tokens = PageTokens(page_token_key, "owned-computing-units")

    async def _shown(self, connection: Connection, row: Record, viewer: str) -> cus.ComputingUnit:
        shared: Sequence[str] = []
        if row["owner_user_id"] == viewer:
            shared = await unit_records.shared_with(connection, row["unit_id"])
        confined = await unit_records.workers_confined(connection, row["unit_id"])
        return records.owned_unit(row, shared, workers_confined=bool(confined))

    async def _visible(self, connection: Connection, unit_id: str, user: str) -> Record:
        violations = FieldViolations()
        check_identifier(violations, unit_id, "computing_unit_id")
        violations.raise_if_any()
        row = await unit_records.usable_unit(connection, unit_id, user)
        if row is None:
            raise not_found(Resource.COMPUTING_UNIT, unit_id)
        return row

    async def _owned(self, connection: Connection, unit_id: str, user: str) -> Record:
        row = await self._visible(connection, unit_id, user)
        if row["owner_user_id"] != user:
            raise _owner_only(unit_id)
        return row

    async def CreateComputingUnit(
        self, request: cus.CreateComputingUnitRequest, context: Any
    ) -> cus.CreateComputingUnitResponse:
        owner = require_user().user_id
        unit = request.computing_unit
        violations = FieldViolations()
        check_display_name(violations, unit.display_name, "computing_unit.display_name")
        violations.check(
            1 <= unit.cores <= MAX_CORES, "computing_unit.cores", f"must be 1 to {MAX_CORES}"
        )
        violations.check(
            MEMORY_MIB[0] <= unit.memory_mib <= MEMORY_MIB[1],
            "computing_unit.memory_mib",
            f"must be {MEMORY_MIB[0]} to {MEMORY_MIB[1]}",
        )
        check_request_id(violations, request.request_id)
        violations.raise_if_any()
        content = fingerprint(unit.display_name, unit.cores, unit.memory_mib)
        async with self._db.connection() as connection:
            row = await unit_records.create(
                connection,
                new_unit_id(),
                owner,
                unit,
                request_id=request.request_id.lower() or None,
                fingerprint=content,
            )
            created = row is not None
            if row is None:  # the same request_id created one already
                row = present(
                    await unit_records.by_request(connection, owner, request.request_id.lower())
                )
                if row["request_fingerprint"] != content:
                    raise invalid_argument(
                        [FieldViolation("request_id", "was already used for a different unit")]
                    )
            shown = await self._shown(connection, row, owner)
        if created:
            log.info("computing unit created", extra={"unit_id": row["unit_id"]})
            self._supervisor.launch_soon(row["unit_id"])
        return cus.CreateComputingUnitResponse(computing_unit=shown)

    async def GetComputingUnit(
        self, request: cus.GetComputingUnitRequest, context: Any
    ) -> cus.GetComputingUnitResponse:
        user = require_user().user_id
        async with self._db.connection() as connection:
            row = await self._visible(connection, request.computing_unit_id, user)
            return cus.GetComputingUnitResponse(
                computing_unit=await self._shown(connection, row, user)
            )

    async def ListComputingUnits(
        self, request: cus.ListComputingUnitsRequest, context: Any
    ) -> cus.ListComputingUnitsResponse:
        user = require_user().user_id
        limit = page_size(request.page_size, default=50, maximum=500)
        request_fingerprint = fingerprint(user)
        after: tuple[datetime | None, str | None] = (None, None)
        if request.page_token:
            position = self._page_tokens.read(request.page_token, request_fingerprint)
            after = (datetime.fromisoformat(position["t"]), position["id"])
        async with self._db.connection() as connection:
            rows = await unit_records.visible_page(connection, user, after, limit + 1)
            page = rows[:limit]
            units = [await self._shown(connection, row, user) for row in page]
        token = ""
        if len(rows) > limit:
            last = page[-1]
            token = self._page_tokens.issue(
                {"t": last["created_at"].isoformat(), "id": last["unit_id"]}, request_fingerprint
            )
        return cus.ListComputingUnitsResponse(computing_units=units, next_page_token=token)

    async def DeleteComputingUnit(
        self, request: cus.DeleteComputingUnitRequest, context: Any
    ) -> cus.DeleteComputingUnitResponse:
        user = require_user().user_id
        async with self._db.connection() as connection:
            try:
                await self._owned(connection, request.computing_unit_id, user)
            except ServiceError as exc:
                if request.allow_missing and exc.code == grpc.StatusCode.NOT_FOUND:
                    return cus.DeleteComputingUnitResponse()
                raise
        cancelled = await self._supervisor.delete(request.computing_unit_id, force=request.force)
        return cus.DeleteComputingUnitResponse(cancelled_execution_ids=cancelled)

    async def ShareComputingUnit(
        self, request: cus.ShareComputingUnitRequest, context: Any
    ) -> cus.ShareComputingUnitResponse:
        return cus.ShareComputingUnitResponse(
            computing_unit=await self._change_share(request, share=True)
        )

    async def UnshareComputingUnit(
        self, request: cus.UnshareComputingUnitRequest, context: Any
    ) -> cus.UnshareComputingUnitResponse:
        return cus.UnshareComputingUnitResponse(
            computing_unit=await self._change_share(request, share=False)
        )

    async def _change_share(
        self,
        request: cus.ShareComputingUnitRequest | cus.UnshareComputingUnitRequest,
        *,
        share: bool,
    ) -> cus.ComputingUnit:
        user = require_user().user_id
        # Both identifiers at once, before the database: one INVALID_ARGUMENT names every bad
        # field, as ShareWarehouse does (a user id as check_member checks a member's).
        violations = FieldViolations()
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        check_user_id(violations, request.user_id, "user_id")
        violations.raise_if_any()
        async with self._db.transaction() as connection:
            row = await self._owned(connection, request.computing_unit_id, user)
            if share:
                if request.user_id == user:
                    raise invalid_argument([FieldViolation("user_id", "is the unit's owner")])
                # A unit that never registered may be shared: acquiring it checks the
                # registration it makes once started.
                confined = await unit_records.workers_confined(connection, row["unit_id"])
                self._supervisor.check_confined(row, request.user_id, confined)
                await unit_records.share(connection, row["unit_id"], request.user_id)
                cancelled: list[str] = []
            else:
                # What the guest still runs there is cancelled too: the unit hears it with
                # its next heartbeat and stops it (see UnitLeaseService).
                cancelled = await unit_records.unshare(connection, row["unit_id"], request.user_id)
            log.info(
                "computing unit shared" if share else "computing unit unshared",
                extra={
                    "unit_id": row["unit_id"],
                    "other_user_id": request.user_id,
                    "cancelled": cancelled,
                },
            )
            return await self._shown(connection, row, user)
