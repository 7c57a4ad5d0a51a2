"""The tables a workflow's Iceberg sources read: results resolved through the registry, and
only in the caller's warehouse; in the platform warehouse, results only."""

from __future__ import annotations

from typing import cast

import grpc
import pytest
from google.protobuf import json_format

from catalog_map.platform import PLATFORM_OWNER
from catalog_map.registry import RegistryReader
from cu_service.source_tables import resolve_source_tables
from service_runtime.errors import ServiceError
from texera.lake.internal.v1 import registry_service_pb2 as rs
from texera.lake.v1 import execution_pb2, workflow_pb2


class Registry:
    """Answers ResolveExecution from the executions it holds, NOT_FOUND for others."""

    def __init__(self, *executions: execution_pb2.Execution) -> None:
        self.executions = {e.execution_id: e for e in executions}

    async def resolve_execution(self, execution_id: str) -> rs.ResolveExecutionResponse:
        if execution_id not in self.executions:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"no execution {execution_id}")
        return rs.ResolveExecutionResponse(execution=self.executions[execution_id])


EARLIER = execution_pb2.Execution(
    execution_id="earlier",
    warehouse_id="w-1",
    outputs=[execution_pb2.ExecutionOutput(operator_id="out", namespace="results", table_name="t")],
)
MINE = rs.CatalogBinding(warehouse_id="w-1", owner_user_id="alice")


def sources(*tables: dict[str, object]) -> workflow_pb2.Workflow:
    operators = [
        {"operator_id": f"s{index}", "iceberg_table_source": table}
        for index, table in enumerate(tables)
    ]
    operators.append({"operator_id": "plain", "range_source": {"end": 3}})
    return json_format.ParseDict(
        {"workflow_id": "w", "operators": operators}, workflow_pb2.Workflow()
    )


def violations(error: ServiceError) -> list[tuple[str, str]]:
    """The offending fields and what is wrong with each, of an INVALID_ARGUMENT."""
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    return [(v.field, v.description) for v in error.violations]


async def resolve(
    workflow: workflow_pb2.Workflow, binding: rs.CatalogBinding = MINE
) -> dict[str, tuple[str, ...]]:
    return await resolve_source_tables(workflow, binding, cast(RegistryReader, Registry(EARLIER)))


async def test_tables_named_directly_and_results_of_earlier_executions() -> None:
    workflow = sources(
        {"table_identifier": {"namespace": ["raw", "daily"], "name": "events"}},
        {"result": {"execution_id": "earlier", "operator_id": "out"}},
    )
    assert await resolve(workflow) == {"s0": ("raw", "daily", "events"), "s1": ("results", "t")}


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({"execution_id": "nobody", "operator_id": "out"}, "no execution nobody"),
        ({"execution_id": "earlier", "operator_id": "other"}, "that execution has no such result"),
    ],
)
async def test_a_result_that_is_not_there_names_the_source(
    result: dict[str, str], problem: str
) -> None:
    with pytest.raises(ServiceError) as raised:
        await resolve(sources({"table_identifier": {"name": "fine"}}, {"result": result}))
    assert violations(raised.value) == [
        ("workflow.operators[1].iceberg_table_source.result", problem)
    ]


async def test_a_result_in_another_warehouse_is_refused() -> None:
    elsewhere = rs.CatalogBinding(warehouse_id="w-2", owner_user_id="alice")
    workflow = sources({"result": {"execution_id": "earlier", "operator_id": "out"}})
    with pytest.raises(ServiceError) as raised:
        await resolve(workflow, elsewhere)
    assert violations(raised.value) == [
        ("workflow.operators[0].iceberg_table_source.result", "that result is in another warehouse")
    ]


async def test_the_platform_warehouse_is_read_through_results_only() -> None:
    platform = rs.CatalogBinding(warehouse_id="w-1", owner_user_id=PLATFORM_OWNER)
    result = sources({"result": {"execution_id": "earlier", "operator_id": "out"}})
    assert await resolve(result, platform) == {"s0": ("results", "t")}
    with pytest.raises(ServiceError) as raised:
        await resolve(sources({"table_identifier": {"name": "anybodys"}}), platform)
    [(field, _)] = violations(raised.value)
    assert field == "workflow.operators[0].iceberg_table_source.table_identifier"
