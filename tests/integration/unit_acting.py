"""Acting as a computing unit at the registry, as tests of what a unit holds need: binding
executions for users and reporting their states, and heartbeats that keep the unit's lease
while a test runs."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from tests.integration.mesh import RegistryClient
from texera.lake.internal.v1 import registry_service_pb2 as rs
from texera.lake.v1 import execution_pb2 as EX


def bind_running(owner: RegistryClient, unit: RegistryClient, warehouse_id: str) -> str:
    """A new execution of owner's, bound to unit and reported RUNNING; its id."""
    execution_id = f"ex-{uuid.uuid4().hex[:12]}"
    acting = unit.for_user(owner)
    acting.call(
        acting.ledger.BindExecution,
        rs.BindExecutionRequest(
            execution_id=execution_id, warehouse_id=warehouse_id, computing_unit_id=unit.subject
        ),
    )
    report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)
    return execution_id


def report(unit: RegistryClient, execution_id: str, state: Any, **fields: Any) -> None:
    unit.call(
        unit.ledger.UpdateExecutionState,
        rs.UpdateExecutionStateRequest(
            execution_id=execution_id, computing_unit_id=unit.subject, state=state, **fields
        ),
    )


class Heartbeats:
    """Renews unit's lease every second until stopped."""

    def __init__(self, unit: RegistryClient) -> None:
        self._unit = unit
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        request = rs.HeartbeatComputingUnitRequest(computing_unit_id=self._unit.subject)
        while not self._stopped.wait(1.0):
            self._unit.call(self._unit.leases.HeartbeatComputingUnit, request)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
