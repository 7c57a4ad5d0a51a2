"""Deleting a warehouse without purge answers the same whether or not the cleaner has dropped
the tables of its deleted executions: their tables are not the warehouse's contents.

Runs on a stack of its own whose cleaner waits an hour between passes, so that every deletion
here happens before it has run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import filtered_numbers, new_user
from tests.integration.mesh import bearer, reason, refused, user
from texera.lake.v1 import execution_service_pb2 as es
from texera.lake.v1 import execution_service_pb2_grpc, warehouse_pb2, warehouse_service_pb2

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def idle_cleaner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("deletion")))
    env = {**TEST_STACK_ENV, "TEXERA_LAKE_WAREHOUSE_CLEANUP_INTERVAL_SECONDS": "3600"}
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _delete_warehouse(stack: Stack, owner: str, warehouse_id: str) -> warehouse_pb2.Warehouse:
    registry = user(stack, owner)
    request = warehouse_service_pb2.DeleteWarehouseRequest(warehouse_id=warehouse_id)
    return registry.call(registry.warehouses.DeleteWarehouse, request).warehouse  # type: ignore[no-any-return]


def _delete_execution(stack: Stack, owner: str, execution_id: str) -> None:
    with stack.channel("gateway", presenting=None) as channel:
        execution_service_pb2_grpc.ExecutionServiceStub(channel).DeleteExecution(
            es.DeleteExecutionRequest(execution_id=execution_id),
            metadata=bearer(stack.token(owner)),
            timeout=60,
        )


def test_deleted_executions_leave_nothing_that_keeps_a_warehouse(idle_cleaner: Stack) -> None:
    stack = idle_cleaner
    client, warehouse_id, _ = new_user(stack, "deleting")
    owner = client.user_id
    flow = filtered_numbers(100, 2, "id % 2 = 0")
    executions = [client.finish(client.submit(warehouse_id, flow).execution_id) for _ in range(2)]
    assert [state_name(e) for e in executions] == ["SUCCEEDED", "SUCCEEDED"]

    # Its executions' tables are the warehouse's contents.
    error = refused(lambda: _delete_warehouse(stack, owner, warehouse_id))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(error) == "WAREHOUSE_NOT_EMPTY"

    # One execution deleted: the other's tables still are.
    _delete_execution(stack, client.user_id, executions[0].execution_id)
    error = refused(lambda: _delete_warehouse(stack, owner, warehouse_id))
    assert reason(error) == "WAREHOUSE_NOT_EMPTY"
    assert "holds 3 table(s)" in str(error.details())

    # Both deleted, their tables still in the catalog (the cleaner has not run): deleted.
    _delete_execution(stack, client.user_id, executions[1].execution_id)
    catalog_name = f"texera-{warehouse_id}"
    assert rest_catalog(stack, catalog_name).list_tables("results")
    deleted = _delete_warehouse(stack, owner, warehouse_id)
    assert deleted.state == warehouse_pb2.WAREHOUSE_STATE_DELETED


def test_a_table_named_like_a_deleted_executions_but_not_its_own_is_contents(
    idle_cleaner: Stack,
) -> None:
    """Another execution's id may sanitize alike: a table counts as a leftover only when its
    properties name the deleted execution."""
    stack = idle_cleaner
    client, warehouse_id, _ = new_user(stack, "lookalike")
    execution = client.finish(
        client.submit(warehouse_id, filtered_numbers(10, 1, "id > 0")).execution_id
    )
    _delete_execution(stack, client.user_id, execution.execution_id)
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    [output] = execution.outputs
    lookalike = f"{output.table_name.partition('__')[0]}__{uuid.uuid4().hex[:8]}"
    catalog.create_table(
        ("results", lookalike),
        schema=catalog.load_table(("results", output.table_name)).schema(),
        properties={"texera.execution-id": "another"},
    )
    error = refused(lambda: _delete_warehouse(stack, client.user_id, warehouse_id))
    assert reason(error) == "WAREHOUSE_NOT_EMPTY"
    assert "holds 1 table(s)" in str(error.details())
