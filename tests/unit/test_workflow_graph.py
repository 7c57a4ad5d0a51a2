"""Static checks of workflows: every problem named by its field and operator."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from cu_service.workflow.graph import validate
from service_runtime.errors import ServiceError
from texera.lake.v1 import workflow_pb2


def flow(*operators: dict[str, Any]) -> workflow_pb2.Workflow:
    return json_format.ParseDict({"operators": list(operators)}, workflow_pb2.Workflow())


def problems(workflow: workflow_pb2.Workflow) -> dict[str, str]:
    with pytest.raises(ServiceError) as raised:
        validate(workflow)
    return {v.field: v.description for v in raised.value.violations}


SOURCE = {"operator_id": "src", "range_source": {"end": 5}}


def test_a_valid_graph_comes_back_in_dependency_order() -> None:
    order = validate(
        flow(
            {
                "operator_id": "j",
                "input_operator_ids": ["a", "b"],
                "join": {"type": "JOIN_TYPE_CROSS"},
                "materialize": True,
            },
            {"operator_id": "b", "range_source": {"end": 2}},
            {"operator_id": "a", "input_operator_ids": ["src"], "filter": {"condition": "id > 1"}},
            SOURCE,
        )
    )
    assert order.index("src") < order.index("a") < order.index("j")
    assert order.index("b") < order.index("j")


def test_operators_without_settings_to_check_are_accepted() -> None:
    order = validate(
        flow(
            SOURCE,
            {"operator_id": "d", "input_operator_ids": ["src"], "distinct": {}},
            {
                "operator_id": "u",
                "input_operator_ids": ["src", "d"],
                "union": {"by_name": True},
                "materialize": True,
            },
        )
    )
    assert order == ["src", "d", "u"]


def test_empty_and_unmaterialized_workflows_are_refused() -> None:
    assert "workflow.operators" in problems(flow())
    assert "no operator is materialized" in problems(flow(SOURCE))["workflow.operators"]


def test_ids_must_be_well_formed_and_unique() -> None:
    found = problems(
        flow(
            {**SOURCE, "operator_id": "bad id", "materialize": True},
            {**SOURCE, "materialize": True},
            SOURCE,
        )
    )
    assert "workflow.operators[0].operator_id" in found
    assert "used twice" in found["workflow.operators[2].operator_id"]


def test_inputs_must_exist_and_match_the_operator_kind() -> None:
    found = problems(
        flow(
            {**SOURCE, "input_operator_ids": ["x"]},
            {
                "operator_id": "f",
                "input_operator_ids": ["ghost"],
                "filter": {"condition": "true"},
                "materialize": True,
            },
            {
                "operator_id": "j",
                "input_operator_ids": ["src"],
                "join": {"type": "JOIN_TYPE_CROSS"},
            },
        )
    )
    assert "takes 0 input(s)" in found["workflow.operators[0].input_operator_ids"]
    assert "'ghost'" in found["workflow.operators[1].input_operator_ids[0]"]
    assert "takes 2 input(s), has 1" in found["workflow.operators[2].input_operator_ids"]


def test_cycles_name_every_operator_on_them() -> None:
    found = problems(
        flow(
            {
                "operator_id": "a",
                "input_operator_ids": ["c"],
                "filter": {"condition": "true"},
                "materialize": True,
            },
            {"operator_id": "b", "input_operator_ids": ["a"], "filter": {"condition": "true"}},
            {"operator_id": "c", "input_operator_ids": ["b"], "filter": {"condition": "true"}},
            SOURCE,
        )
    )
    assert set(found) == {f"workflow.operators[{i}].input_operator_ids" for i in range(3)}
    assert all("cycle" in description for description in found.values())


@pytest.mark.parametrize(
    ("operator", "field"),
    [
        ({"filter": {"condition": " "}}, "filter.condition"),
        ({"projection": {}}, "projection.columns"),
        (
            {"aggregate": {"aggregations": [{"function": "AGGREGATE_FUNCTION_SUM", "alias": "s"}]}},
            "aggregate.aggregations[0].column",
        ),
        (
            {"aggregate": {"aggregations": [{"function": "AGGREGATE_FUNCTION_COUNT"}]}},
            "aggregate.aggregations[0].alias",
        ),
        ({"sort": {}}, "sort.keys"),
        ({"limit": {"count": -1}}, "limit.count"),
        ({"sql_query": {"query": ""}}, "sql_query.query"),
        (
            {
                "python_udf": {
                    "code": "def other(b):\n    yield from b\n",
                    "output_columns": [{"name": "x", "data_type": "int"}],
                }
            },
            "python_udf.function_name",
        ),
        (
            {
                "python_udf": {
                    "code": "def process(:\n",
                    "output_columns": [{"name": "x", "data_type": "int"}],
                }
            },
            "python_udf.code",
        ),
    ],
)
def test_required_fields_of_transforms(operator: dict[str, Any], field: str) -> None:
    found = problems(
        flow(
            SOURCE,
            {"operator_id": "t", "input_operator_ids": ["src"], "materialize": True, **operator},
        )
    )
    assert f"workflow.operators[1].{field}" in found
    assert "operator 't'" in found[f"workflow.operators[1].{field}"]


@pytest.mark.parametrize(
    ("source", "field"),
    [
        (
            {
                "inline_source": {
                    "columns": [
                        {"name": "a", "data_type": "int"},
                        {"name": "a", "data_type": "int"},
                    ]
                }
            },
            "inline_source.columns[1].name",
        ),
        (
            {"inline_source": {"columns": [{"name": "a", "data_type": "int"}], "rows": [[1, 2]]}},
            "inline_source.rows[0]",
        ),
        (
            {"file_source": {"format": "FILE_FORMAT_CSV", "path": "relative/path.csv"}},
            "file_source.path",
        ),
        ({"file_source": {"path": "/data/x.parquet"}}, "file_source.format"),
        ({"iceberg_table_source": {}}, "iceberg_table_source.table"),
        ({"range_source": {"partitions": -2}}, "range_source.partitions"),
    ],
)
def test_required_fields_of_sources(source: dict[str, Any], field: str) -> None:
    found = problems(flow({"operator_id": "s", "materialize": True, **source}))
    assert f"workflow.operators[0].{field}" in found


def test_inline_values_with_no_kind_are_refused_by_their_field() -> None:
    """What protobufjs with keepCase sends for `number_value`: a Value with no kind."""
    workflow = flow(
        {
            "operator_id": "rows",
            "inline_source": {"columns": [{"name": "n", "data_type": "bigint"}]},
            "materialize": True,
        }
    )
    rows = workflow.operators[0].inline_source.rows
    rows.add().values.add().number_value = 1
    rows.add().values.add()  # no kind
    nested = rows.add().values.add().list_value
    nested.values.add().null_value = struct_pb2.NULL_VALUE
    nested.values.add().struct_value.fields["x"].Clear()
    found = problems(workflow)
    path = "workflow.operators[0].inline_source.rows"
    assert found == {
        f"{path}[1].values[0]": "operator 'rows': a value with no kind set; a null is null_value",
        f"{path}[2].values[0].list_value.values[1].struct_value.fields['x']": (
            "operator 'rows': a value with no kind set; a null is null_value"
        ),
    }


def test_inline_values_with_no_kind_are_counted_past_the_first_ten() -> None:
    workflow = flow(
        {
            "operator_id": "rows",
            "inline_source": {"columns": [{"name": "n", "data_type": "bigint"}]},
            "materialize": True,
        }
    )
    for _ in range(5000):
        workflow.operators[0].inline_source.rows.add().values.add()
    found = problems(workflow)
    assert len(found) == 11
    assert found["workflow.operators[0].inline_source.rows"] == (
        "operator 'rows': 4990 more rows hold values with no kind set"
    )


def test_null_values_are_set_values() -> None:
    workflow = json_format.ParseDict(
        {
            "operators": [
                {
                    "operator_id": "rows",
                    "inline_source": {
                        "columns": [{"name": "n", "data_type": "bigint"}],
                        "rows": [[None], [3]],
                    },
                    "materialize": True,
                }
            ]
        },
        workflow_pb2.Workflow(),
    )
    assert validate(workflow) == ["rows"]
