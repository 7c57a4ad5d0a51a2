"""A page never outgrows what a default gRPC client accepts (4 MiB): it ends early, with a
token for the rest."""

from __future__ import annotations

import pytest

from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.integration.executions import new_user, workflow
from tests.integration.results import results_as

pytestmark = pytest.mark.integration

ROWS = 10_000
#: The result service's default bound on a page's rows (TEXERA_LAKE_RESULT_MAX_PAGE_BYTES).
MAX_PAGE_BYTES = 3 * 1024 * 1024


def test_a_page_of_kilobyte_rows_fits_a_default_client(stack: Stack) -> None:
    unit, warehouse_id, _ = new_user(stack, "wide")
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": ROWS, "partitions": 2}},
            {
                "operator_id": "wide",
                "input_operator_ids": ["n"],
                "sql_query": {"query": "SELECT id, repeat('x', 1000) AS padding FROM n"},
                "materialize": True,
            },
        ]
    )
    execution = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    # Through the gateway, with grpcio's default 4 MiB receive limit.
    results = results_as(stack, unit.user_id, "gateway")
    first = results.page(execution.execution_id, "wide", page_size=ROWS)
    assert 0 < len(first.rows) < ROWS
    assert first.next_page_token
    assert sum(row.ByteSize() for row in first.rows) <= MAX_PAGE_BYTES
    rows, snapshots = results.all_rows(execution.execution_id, "wide", page_size=ROWS)
    assert sorted(int(row["id"]) for row in rows) == list(range(ROWS))  # none lost, none twice
    assert {len(row["padding"]) for row in rows} == {1000}
    assert len(snapshots) == 1
