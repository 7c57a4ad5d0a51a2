"""A computing unit that does not confine the Python workers that run users' code runs only its
owner's executions: the registry refuses to share it and refuses the users it was shared with
(AcquireComputingUnit, BindExecution), as its latest registration says, unless
TEXERA_LAKE_WAREHOUSE_SHARE_UNCONFINED_UNITS lets it. On the real registry and PostgreSQL; the
units are registrations without a process (see tests/integration/mesh.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from embedded_stack.stack import Stack
from tests.integration.mesh import (
    RegistryClient,
    create_warehouse,
    reason_of,
    record_unit,
    refused,
    register_unit,
    registry_as,
)
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import computing_unit_service_pb2, computing_unit_service_pb2_grpc

pytestmark = pytest.mark.integration

rs = registry_service_pb2
cus = computing_unit_service_pb2
REGISTRY = "warehouse-service"
SETTING = "TEXERA_LAKE_WAREHOUSE_SHARE_UNCONFINED_UNITS"


@dataclass
class Caller:
    """A user calling one registry process's internal services and ComputingUnitService."""

    stack: Stack
    part: str
    registry: RegistryClient
    units: computing_unit_service_pb2_grpc.ComputingUnitServiceStub

    @property
    def subject(self) -> str:
        return self.registry.subject

    def share(self, unit_id: str, other: str) -> cus.ComputingUnit:
        request = cus.ShareComputingUnitRequest(computing_unit_id=unit_id, user_id=other)
        metadata = self.registry.metadata
        return self.units.ShareComputingUnit(request, metadata=metadata, timeout=60).computing_unit

    def get(self, unit_id: str) -> cus.ComputingUnit:
        request = cus.GetComputingUnitRequest(computing_unit_id=unit_id)
        metadata = self.registry.metadata
        return self.units.GetComputingUnit(request, metadata=metadata, timeout=60).computing_unit

    def acquire(self, unit_id: str) -> rs.UnitRegistration:
        request = rs.AcquireComputingUnitRequest(computing_unit_id=unit_id)
        acquire = self.registry.leases.AcquireComputingUnit
        return acquire(request, metadata=self.registry.metadata, timeout=120).registration

    def bind_through(self, unit_id: str, warehouse_id: str) -> Any:
        """Binds an execution of this user as unit_id does when the user submits to it."""
        acting = registry_as(
            self.stack,
            self.subject,
            self.stack.unit_credential(unit_id),
            on_behalf=self.stack.unit_token(self.subject, unit_id),
            part=self.part,
            as_unit=True,
        )
        request = rs.BindExecutionRequest(
            execution_id=f"ex-{uuid.uuid4().hex[:12]}",
            warehouse_id=warehouse_id,
            computing_unit_id=unit_id,
        )
        return acting.call(acting.ledger.BindExecution, request)


def people(stack: Stack, part: str = REGISTRY) -> tuple[Caller, Caller, Caller]:
    """A unit's owner, a user it is shared with, and one it may be shared with, calling part."""
    suffix = uuid.uuid4().hex[:6]
    return tuple(  # type: ignore[return-value]
        Caller(
            stack,
            part,
            registry_as(
                stack,
                f"{name}-{suffix}",
                stack.internal_token(f"{name}-{suffix}"),
                part=part,
            ),
            computing_unit_service_pb2_grpc.ComputingUnitServiceStub(stack.channel(part)),
        )
        for name in ("owner", "guest", "newcomer")
    )


def not_confined(call: Callable[[], Any], unit_id: str) -> None:
    """call is refused because the unit's workers are not confined."""
    error = refused(call)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert reason_of(error) == ("COMPUTING_UNIT_NOT_CONFINED", {"computing_unit_id": unit_id})
    message = error.details() or ""
    assert unit_id in message
    assert "owner" in message
    assert SETTING in message


def test_an_unconfined_unit_runs_only_its_owners_executions(stack: Stack) -> None:
    owner, guest, newcomer = people(stack)
    guests_warehouse = create_warehouse(guest.registry, stack.provision_bucket("confinement"))
    # Shared already (as it may have been while it was confined), then registered unconfined.
    unit_id = register_unit(
        stack, owner=owner.subject, shared_with=(guest.subject,), workers_confined=False
    )
    not_confined(lambda: owner.share(unit_id, newcomer.subject), unit_id)
    not_confined(lambda: guest.acquire(unit_id), unit_id)
    not_confined(lambda: guest.bind_through(unit_id, guests_warehouse.warehouse_id), unit_id)
    assert owner.acquire(unit_id).computing_unit_id == unit_id
    shown = owner.get(unit_id)
    assert not shown.workers_confined
    assert list(shown.shared_with_user_ids) == [guest.subject]

    # Restarted where it can confine its workers: its new registration is what counts.
    register_unit(stack, unit_id, owner=owner.subject, workers_confined=True)
    assert guest.acquire(unit_id).computing_unit_id == unit_id
    assert guest.bind_through(unit_id, guests_warehouse.warehouse_id).created
    assert owner.share(unit_id, newcomer.subject).workers_confined


def test_a_confined_unit_is_shared_and_used_until_it_registers_unconfined(stack: Stack) -> None:
    owner, guest, newcomer = people(stack)
    unit_id = register_unit(stack, owner=owner.subject, workers_confined=True)
    shown = owner.share(unit_id, guest.subject)
    assert shown.workers_confined
    assert list(shown.shared_with_user_ids) == [guest.subject]
    assert guest.acquire(unit_id).computing_unit_id == unit_id
    assert guest.get(unit_id).workers_confined

    register_unit(stack, unit_id, owner=owner.subject, workers_confined=False)
    not_confined(lambda: guest.acquire(unit_id), unit_id)
    not_confined(lambda: owner.share(unit_id, newcomer.subject), unit_id)
    assert owner.acquire(unit_id).computing_unit_id == unit_id


def test_a_unit_that_never_registered_may_be_shared(stack: Stack) -> None:
    """Acquiring it starts it and judges the registration it then makes."""
    owner, guest, _ = people(stack)
    unit_id = f"cu-{uuid.uuid4().hex[:8]}"
    record_unit(stack, unit_id, owner.subject)
    shown = owner.share(unit_id, guest.subject)
    assert list(shown.shared_with_user_ids) == [guest.subject]
    assert not shown.workers_confined


def test_the_registry_may_let_unconfined_units_run_others_executions(stack: Stack) -> None:
    part = "registry-sharing-unconfined"
    stack.start_part(part, "warehouse_service", {SETTING: "true"})
    try:
        owner, guest, _ = people(stack, part)
        guests_warehouse = create_warehouse(guest.registry, stack.provision_bucket("unconfined"))
        unit_id = register_unit(stack, owner=owner.subject, workers_confined=False)
        assert not owner.share(unit_id, guest.subject).workers_confined
        assert guest.acquire(unit_id).computing_unit_id == unit_id
        assert guest.bind_through(unit_id, guests_warehouse.warehouse_id).created
    finally:  # a replica with other settings must not go on working the shared registry
        stack.stop_part(part)
