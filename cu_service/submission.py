"""Checks of a SubmitExecutionRequest against the unit's rules and limits.

The request alone is checked first, the workflow's sizes before its graph, so
that an oversized workflow costs no more than counting. SQL queries are checked
once more after Spark has analyzed them, for what only the analysis shows.
"""

from __future__ import annotations

import uuid

from cu_service.spark import analyzed_plan
from cu_service.workflow import graph
from cu_service.workflow.compiler import CompiledWorkflow
from cu_service.workflow.limits import WorkflowLimits, check_limits, plan_problem
from service_runtime.errors import FieldViolation, FieldViolations, invalid_argument
from service_runtime.identifiers import IDENTIFIER
from texera.lake.v1 import execution_service_pb2, workflow_pb2


def check_request(
    request: execution_service_pb2.SubmitExecutionRequest, unit_id: str, limits: WorkflowLimits
) -> None:
    """Raises INVALID_ARGUMENT naming every bad field."""
    violations = FieldViolations()
    if request.execution_id and not IDENTIFIER.match(request.execution_id):
        violations.add("execution_id", "must be 1 to 64 letters, digits, '_' or '-'")
    if request.warehouse_id:  # without one, the registry decides (the platform's, if any)
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


def check_queries(
    workflow: workflow_pb2.Workflow, compiled: CompiledWorkflow, limits: WorkflowLimits
) -> None:
    """Raises INVALID_ARGUMENT if an analyzed SQL query asks for more partitions or range rows
    than the limits allow; calls into the JVM."""
    for index, op in enumerate(workflow.operators):
        if op.WhichOneof("kind") != "sql_query":
            continue
        problem = plan_problem(analyzed_plan(compiled.frames[op.operator_id]), limits)
        if problem is not None:
            raise invalid_argument(
                [
                    FieldViolation(
                        f"workflow.operators[{index}].sql_query.query",
                        f"operator {op.operator_id!r}: {problem}",
                    )
                ]
            )
