"""Users as the tests meet them: each with a warehouse of their own, calling the gateway."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from embedded_stack.stack import Stack
from tests.integration.executions import UnitClient
from tests.integration.mesh import bearer, create_warehouse, user
from tests.integration.results import ResultClient
from texera.lake.v1 import (
    computing_unit_service_pb2,
    computing_unit_service_pb2_grpc,
    execution_service_pb2_grpc,
    result_service_pb2_grpc,
)

cus = computing_unit_service_pb2


@dataclass
class Person:
    """A user with a warehouse of their own, calling the gateway."""

    user_id: str
    warehouse_id: str
    units: computing_unit_service_pb2_grpc.ComputingUnitServiceStub
    executions: UnitClient
    results: ResultClient

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self.executions.metadata

    def create_unit(self, name: str, cores: int = 1) -> cus.ComputingUnit:
        request = cus.CreateComputingUnitRequest(
            computing_unit=cus.ComputingUnit(display_name=name, cores=cores, memory_mib=1024)
        )
        return self.units.CreateComputingUnit(
            request, metadata=self.metadata, timeout=60
        ).computing_unit

    def unit(self, unit_id: str) -> cus.ComputingUnit:
        request = cus.GetComputingUnitRequest(computing_unit_id=unit_id)
        return self.units.GetComputingUnit(
            request, metadata=self.metadata, timeout=60
        ).computing_unit

    def listed(self) -> list[cus.ComputingUnit]:
        request = cus.ListComputingUnitsRequest()
        return list(
            self.units.ListComputingUnits(
                request, metadata=self.metadata, timeout=60
            ).computing_units
        )

    def share(self, unit_id: str, other: str, *, share: bool = True) -> cus.ComputingUnit:
        if share:
            return self.units.ShareComputingUnit(
                cus.ShareComputingUnitRequest(computing_unit_id=unit_id, user_id=other),
                metadata=self.metadata,
                timeout=60,
            ).computing_unit
        return self.units.UnshareComputingUnit(
            cus.UnshareComputingUnitRequest(computing_unit_id=unit_id, user_id=other),
            metadata=self.metadata,
            timeout=60,
        ).computing_unit

    def delete(self, unit_id: str, *, force: bool = False) -> cus.DeleteComputingUnitResponse:
        request = cus.DeleteComputingUnitRequest(computing_unit_id=unit_id, force=force)
        return self.units.DeleteComputingUnit(request, metadata=self.metadata, timeout=180)


def person(stack: Stack, name: str) -> Person:
    user_id = f"{name}-{uuid.uuid4().hex[:6]}"
    warehouse_id = create_warehouse(user(stack, user_id), stack.provision_bucket(name)).warehouse_id
    channel = stack.channel("gateway", presenting=None)
    metadata = bearer(stack.token(user_id))
    return Person(
        user_id,
        warehouse_id,
        computing_unit_service_pb2_grpc.ComputingUnitServiceStub(channel),
        UnitClient(
            execution_service_pb2_grpc.ExecutionServiceStub(channel), metadata, user_id=user_id
        ),
        ResultClient(result_service_pb2_grpc.ResultServiceStub(channel), metadata),
    )
