"""UnitLeaseService: computing units register, renew their leases with heartbeats (and their
credentials and certificates with them), are listed for routing, and are acquired for a user."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from service_runtime.callers import require_service, require_unit, require_user
from service_runtime.errors import FieldViolations, Resource, ServiceError, not_found
from service_runtime.identifiers import check_identifier
from service_runtime.pagination import PageTokens, fingerprint, page_size
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from warehouse_service import records
from warehouse_service.api.validation import check_endpoint_address
from warehouse_service.internal.registry_checks import same_caller
from warehouse_service.store import unit_registrations
from warehouse_service.store.db import Connection, Database, present
from warehouse_service.units.unit_certificates import UnitCertificates
from warehouse_service.units.unit_credentials import UnitCredentials
from warehouse_service.units.unit_supervisor import UnitSupervisor

log = logging.getLogger("warehouse_service.unit_leases")
#: Unfinished executions a heartbeat may list (a unit runs and queues far fewer).
MAX_UNFINISHED = 1000


class UnitLeaseServicer(registry_service_pb2_grpc.UnitLeaseServiceServicer):
    def __init__(
        self,
        db: Database,
        supervisor: UnitSupervisor,
        *,
        page_token_key: str,
        heartbeat_interval_seconds: float,
        lease_seconds: float,
        unit_credentials: UnitCredentials,
        unit_certificates: UnitCertificates | None = None,
    ) -> None:
        self._db = db
        self._supervisor = supervisor
        self._heartbeat_interval = heartbeat_interval_seconds
        self._lease = lease_seconds
        self._unit_credentials = unit_credentials
        self._unit_certificates = unit_certificates
        self._unit_tokens = PageTokens(page_token_key, "unit-registrations")

    async def RegisterComputingUnit(
        self, request: registry_service_pb2.RegisterComputingUnitRequest, context: Any
    ) -> registry_service_pb2.RegisterComputingUnitResponse:
        identity = require_unit()
        violations = FieldViolations()
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        check_endpoint_address(violations, request.endpoint, "endpoint")
        violations.check(1 <= request.capacity <= 1000, "capacity", "must be 1 to 1000")
        violations.raise_if_any()
        same_caller(identity, request.computing_unit_id)
        async with self._db.transaction() as connection:
            await _check_launch_address(connection, request.computing_unit_id, request.endpoint)
            # A unit that registers again was restarted: what it ran is gone with its memory.
            lost = await unit_registrations.fail_unfinished(connection, request.computing_unit_id)
            row = await unit_registrations.register(
                connection,
                request.computing_unit_id,
                request.endpoint,
                request.capacity,
                workers_confined=request.workers_confined,
                lease_seconds=self._lease,
            )
        log.info(
            "computing unit registered",
            extra={
                "computing_unit_id": request.computing_unit_id,
                "failed": lost,
                "workers_confined": request.workers_confined,
            },
        )
        response = registry_service_pb2.RegisterComputingUnitResponse(
            registration=records.registration(present(row)),
            credential=self._unit_credentials.renewed(identity),
        )
        response.heartbeat_interval.FromMilliseconds(int(self._heartbeat_interval * 1000))
        return response

    async def HeartbeatComputingUnit(
        self, request: registry_service_pb2.HeartbeatComputingUnitRequest, context: Any
    ) -> registry_service_pb2.HeartbeatComputingUnitResponse:
        identity = require_unit()
        violations = FieldViolations()
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        violations.check(
            request.running_executions >= 0, "running_executions", "must not be negative"
        )
        violations.check(
            request.queued_executions >= 0, "queued_executions", "must not be negative"
        )
        violations.check(
            len(request.unfinished_execution_ids) <= MAX_UNFINISHED,
            "unfinished_execution_ids",
            f"must be at most {MAX_UNFINISHED}",
        )
        for index, execution_id in enumerate(request.unfinished_execution_ids):
            check_identifier(violations, execution_id, f"unfinished_execution_ids[{index}]")
        violations.raise_if_any()
        same_caller(identity, request.computing_unit_id)
        certificate_chain = b""
        if request.certificate_signing_request and self._unit_certificates is not None:
            certificate_chain = self._unit_certificates.renewed(
                request.computing_unit_id, request.certificate_signing_request
            )
        async with self._db.connection() as connection:
            row = await unit_registrations.renew_lease(
                connection,
                request.computing_unit_id,
                request.running_executions,
                request.queued_executions,
                self._lease,
            )
            if row is None:
                raise not_found(
                    Resource.UNIT_REGISTRATION, request.computing_unit_id, "register again"
                )
            # What the registry ended itself (unsharing, say) reaches the unit within a beat.
            ended = await unit_registrations.ended_executions(
                connection, request.computing_unit_id, request.unfinished_execution_ids
            )
        return registry_service_pb2.HeartbeatComputingUnitResponse(
            registration=records.registration(row),
            credential=self._unit_credentials.renewed(identity),
            certificate_chain=certificate_chain,
            ended_execution_ids=ended,
        )

    async def ListUnitRegistrations(
        self, request: registry_service_pb2.ListUnitRegistrationsRequest, context: Any
    ) -> registry_service_pb2.ListUnitRegistrationsResponse:
        require_service()
        limit = page_size(request.page_size, default=100, maximum=1000)
        request_fingerprint = fingerprint(request.healthy_only)
        offset = 0
        if request.page_token:
            offset = int(self._unit_tokens.read(request.page_token, request_fingerprint)["offset"])
        async with self._db.connection() as connection:
            rows = await unit_registrations.least_loaded(
                connection, request.healthy_only, offset, limit + 1
            )
        token = ""
        if len(rows) > limit:
            token = self._unit_tokens.issue({"offset": offset + limit}, request_fingerprint)
        return registry_service_pb2.ListUnitRegistrationsResponse(
            registrations=[records.registration(row) for row in rows[:limit]],
            next_page_token=token,
        )

    async def AcquireComputingUnit(
        self, request: registry_service_pb2.AcquireComputingUnitRequest, context: Any
    ) -> registry_service_pb2.AcquireComputingUnitResponse:
        user = require_user().user_id
        if request.computing_unit_id:
            violations = FieldViolations()
            check_identifier(violations, request.computing_unit_id, "computing_unit_id")
            violations.raise_if_any()
        remaining = context.time_remaining()
        # Answer before the caller's deadline, so that it hears why it must retry.
        wait = None if remaining is None else max(remaining - 1.0, 0.5)
        registration = await self._supervisor.acquire(user, request.computing_unit_id, wait)
        return registry_service_pb2.AcquireComputingUnitResponse(
            registration=records.registration(registration)
        )


async def _check_launch_address(connection: Connection, unit_id: str, endpoint: str) -> None:
    """Refuses a registration at another address than the one the unit's launcher gave it: a
    credential taken from a unit cannot move the unit's calls elsewhere."""
    launched = await unit_registrations.launch_address(connection, unit_id)
    if launched and launched != endpoint:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"computing unit {unit_id} was launched to serve at {launched}, not {endpoint}",
            reason="UNIT_ENDPOINT_NOT_LAUNCHED",
            metadata={"computing_unit_id": unit_id},
        )
