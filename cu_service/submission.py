"""Checks of a SubmitExecutionRequest that need nothing but the request and the unit's settings.

The workflow's sizes are checked against the unit's limits first, so that an
oversized workflow costs no more than counting; then its graph.
"""

from __future__ import annotations

import uuid

from cu_service.workflow import graph
from cu_service.workflow.limits import WorkflowLimits, check_limits
from service_runtime.errors import FieldViolations
from service_runtime.identifiers import IDENTIFIER
from texera.lake.v1 import execution_service_pb2


def check_request(
    request: execution_service_pb2.SubmitExecutionRequest, unit_id: str, limits: WorkflowLimits
) -> None:
    """Raises INVALID_ARGUMENT naming every bad field."""
    violations = FieldViolations()
    if request.execution_id and not IDENTIFIER.match(request.execution_id):
        violations.add("execution_id", "must be 1 to 64 letters, digits, '_' or '-'")
    try:
        uuid.UUID(request.warehouse_id)
    except ValueError:
        violations.add("warehouse_id", "must be a warehouse id (a UUID)")
    if request.computing_unit_id and request.computing_unit_id != unit_id:
        violations.add(
            "computing_unit_id", f"names another computing unit than this one ({unit_id})"
        )
    if request.request_id:
        try:
            uuid.UUID(request.request_id)
        except ValueError:
            violations.add("request_id", "must be a UUID")
    if not request.HasField("workflow"):
        violations.add("workflow", "is required")
    violations.raise_if_any()
    check_limits(request.workflow, limits)
    graph.validate(request.workflow)
