"""Structs that Spark computes as null, whose fields Spark declares non-nullable, written by the
computing unit and read back exactly: the result table's schema says such fields may be null
(see cu_service/writer/table_schema.py)."""

from __future__ import annotations

from typing import Any

import pytest

from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import new_user, workflow
from tests.integration.results import results_like

pytestmark = pytest.mark.integration

#: A struct null in the row with id 0; b is never null in the others (so Spark declares it
#: non-nullable).
NULL_AT_0 = "CASE WHEN id=0 THEN NULL ELSE named_struct('b', CAST(id AS STRING)) END"
#: (alias, expression) of every projected column.
COLUMNS = [
    ("id", "id"),
    ("s", NULL_AT_0),
    ("a", f"array({NULL_AT_0})"),
    ("m", f"map('k', {NULL_AT_0})"),
    (
        "d",
        "CASE WHEN id=0 THEN NULL ELSE named_struct('t', named_struct('b', CAST(id AS STRING))) END",
    ),
    ("n", "CASE WHEN id=0 THEN NULL ELSE array(CAST(id AS STRING)) END"),
]
ROWS = 4


def _row(i: int) -> dict[str, Any]:
    """The row with id i, as ReadResultPage gives it."""
    if i == 0:
        return {"id": 0, "s": None, "a": [None], "m": {"k": None}, "d": None, "n": None}
    b = {"b": str(i)}
    return {"id": i, "s": b, "a": [b], "m": {"k": b}, "d": {"t": b}, "n": [str(i)]}


def test_null_structs_with_fields_spark_declares_non_nullable_are_written_and_read_back(
    stack: Stack,
) -> None:
    unit, warehouse_id, _ = new_user(stack, "nested-nulls")
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": ROWS, "partitions": 2}},
            {
                "operator_id": "shaped",
                "input_operator_ids": ["n"],
                "projection": {
                    "columns": [{"expression": e, "alias": alias} for alias, e in COLUMNS]
                },
                "materialize": True,
            },
        ]
    )
    execution = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error

    rows, _ = results_like(stack, unit).all_rows(execution.execution_id, "shaped")
    assert sorted(rows, key=lambda row: row["id"]) == [_row(i) for i in range(ROWS)]

    [output] = execution.outputs
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    schema = catalog.load_table((output.namespace, output.table_name)).schema()
    optional = ["s", "s.b", "a.element", "a.element.b", "m.value.b", "d", "d.t", "d.t.b", "n"]
    assert [path for path in optional if schema.find_field(path).required] == []
    # Never null, as Spark says: a top-level column, a map's keys, a null list's elements.
    assert [schema.find_field(p).required for p in ("id", "a", "m", "m.key", "n.element")] == [
        True
    ] * 5
