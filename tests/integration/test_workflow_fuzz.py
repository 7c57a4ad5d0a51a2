"""Random workflows, good and hostile, through the unit's whole validation and Spark analysis,
and through the real stack: each is either accepted or refused with INVALID_ARGUMENT naming a
field; nothing else escapes (which a client would see as INTERNAL or UNKNOWN), nothing hangs,
and what is accepted ends SUCCEEDED or FAILED with a message of its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cu_service.workflow.file_roots import EXAMPLES
from embedded_stack.stack import Stack
from service_runtime.errors import ServiceError
from service_runtime.execution_states import state_name
from tests.integration.compile import compile_flow, local_spark
from tests.integration.executions import UnitClient, new_user, workflow
from tests.integration.mesh import bad_fields
from texera.lake.v1 import execution_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COLUMNS = ["k", "v", "id", "d", "nope", "`odd name`"]
TYPES = [
    "int",
    "bigint",
    "string",
    "double",
    "boolean",
    "date",
    "timestamp",
    "timestamp_ntz",
    "binary",
    "decimal(10,2)",
    "decimal(38,0)",
    "decimal(38,37)",
    "decimal(40,2)",
    "array<int>",
    "map<string,int>",
    "struct<a:int,b:string>",
    "nonsense",
    "",
]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            "2024-02-29",
            "10000-01-01",
            "0000-01-01",
            "9999-12-31T23:59:59-01:00",
            "0001-01-01T00:00:00+01:00",
            "1" * 39,
            "0." + "1" * 40,
            "1e99999",
            "NaN",
            "Infinity",
            "²",
            "aGk=",
        ]
    ),
    st.text(max_size=8),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "1", "x"]), st.integers(-5, 5), max_size=2),
)
FRAGMENTS = [
    "1",
    "k + 1",
    "upper(v)",
    "reflect('java.lang.System', 'getenv', 'PATH')",
    "ReFlEcT('java.lang.System', 'getProperty', 'user.name')",
    "java_method('java.lang.System', 'getenv', 'X')",
    "input_file_name()",
    "current_user()",
    "make_date(10000, 1, 1)",
    "date_add(DATE'9999-12-31', 1)",
    "CAST('x' AS INT)",
    "(SELECT max(id) FROM range(3))",
    "(SELECT count(*) FROM text.`/etc/hostname`)",
    "k IN (SELECT 1)",
    "sum(k) OVER ()",
    "/* a comment */ 2",
    "'it''s'",
    "NULL",
    "1 / 0",
]
PATHS = [
    "/etc/hostname",
    str(EXAMPLES / "orders.csv"),
    str(EXAMPLES / "*.csv"),
    str(EXAMPLES / ".." / "README.md"),
    f"file://{EXAMPLES}/orders.csv",
    "hdfs://namenode/x",
    "",
    "relative.csv",
    "/",
]


@st.composite
def expressions(draw: st.DrawFn, depth: int = 2) -> str:
    choice = draw(st.integers(0, 5))
    if choice == 0 or depth == 0:
        return draw(st.sampled_from(FRAGMENTS + COLUMNS))
    if choice == 1:
        return draw(st.text(max_size=12))
    left, right = draw(expressions(depth - 1)), draw(expressions(depth - 1))
    return draw(
        st.sampled_from(
            [f"{left} + {right}", f"{left} = {right}", f"coalesce({left}, {right})", f"({left})"]
        )
    )


@st.composite
def queries(draw: st.DrawFn, inputs: list[str]) -> str:
    table = draw(st.sampled_from([*inputs, "missing", "text.`/etc/hostname`", "global_temp.x"]))
    expression = draw(expressions())
    return draw(
        st.sampled_from(
            [
                f"SELECT {expression} AS c FROM `{table}`",
                f"WITH w AS (SELECT * FROM `{table}`) SELECT *, {expression} FROM w",
                f"SELECT * FROM `{table}` WHERE {expression}",
                f"SELECT * FROM VALUES ({expression}) AS t(c)",
                f"SELECT * FROM `{table}` LATERAL VIEW explode(array({expression})) x AS e",
                f"DROP TABLE `{table}`",
                f"SELECT * FROM `{table}`; SELECT {expression}",
                "SELECT TRANSFORM(*) USING 'id' FROM " + f"`{table}`",
                draw(st.text(max_size=20)),
            ]
        )
    )


@st.composite
def operator_ids(draw: st.DrawFn, index: int) -> str:
    """Mostly good and unique; now and then malformed or taken."""
    return draw(st.sampled_from([f"op{index}"] * 60 + ["", "bad id", "x" * 65, "op0"]))


@st.composite
def settings_of(draw: st.DrawFn, kind: str, inputs: list[str]) -> dict[str, Any]:
    if kind == "inline_source":
        columns = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["k", "v", "d", "k"]),
                        "data_type": st.sampled_from(TYPES),
                    }
                ),
                max_size=3,
            )
        )
        rows = draw(st.lists(st.lists(VALUES, max_size=4), max_size=3))
        return {"columns": columns, "rows": rows}
    if kind == "range_source":
        return {
            "start": draw(st.integers(-10, 10)),
            "end": draw(st.integers(-10, 50)),
            "step": draw(st.integers(-3, 3)),
            "partitions": draw(st.sampled_from([0, 1, 2, 3, -1])),
            "column_name": draw(st.sampled_from(["", "id", "k", "", "id", "k", "x" * 130])),
        }
    if kind == "file_source":
        return {
            "format": draw(
                st.sampled_from(["FILE_FORMAT_CSV", "FILE_FORMAT_JSON", "FILE_FORMAT_UNSPECIFIED"])
            ),
            "path": draw(st.sampled_from(PATHS)),
            "csv_header": draw(st.booleans()),
        }
    if kind == "filter":
        return {"condition": draw(expressions())}
    if kind == "projection":
        return {
            "columns": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {"expression": expressions(), "alias": st.sampled_from(["", "a", "k"])}
                    ),
                    min_size=1,
                    max_size=3,
                )
            )
        }
    if kind == "aggregate":
        return {
            "group_by": draw(st.lists(st.sampled_from(COLUMNS), max_size=2)),
            "aggregations": [
                {
                    "function": draw(st.integers(0, 6)),
                    "column": draw(st.sampled_from(["", *COLUMNS])),
                    "alias": draw(st.sampled_from(["n", "m", ""])),
                }
            ],
        }
    if kind == "join":
        return {
            "type": draw(st.integers(0, 7)),
            "keys": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "left_column": st.sampled_from(COLUMNS),
                            "right_column": st.sampled_from(COLUMNS),
                        }
                    ),
                    max_size=2,
                )
            ),
        }
    if kind == "sort":
        return {
            "keys": [{"column": draw(st.sampled_from(COLUMNS)), "descending": draw(st.booleans())}]
        }
    if kind == "limit":
        return {"count": draw(st.integers(-2, 2**40)), "offset": draw(st.integers(-2, 5))}
    if kind == "union":
        return {"by_name": draw(st.booleans())}
    if kind == "sql_query":
        return {"query": draw(queries(inputs))}
    if kind == "python_udf":
        return {
            "code": draw(
                st.sampled_from(
                    [
                        "def process(batches):\n    yield from batches\n",
                        "def process(:\n",
                        "x = 1\n",
                        "",
                    ]
                )
            ),
            "output_columns": [{"name": "k", "data_type": draw(st.sampled_from(TYPES))}],
        }
    return {}


KINDS = [
    "inline_source",
    "range_source",
    "file_source",
    "filter",
    "projection",
    "aggregate",
    "join",
    "sort",
    "limit",
    "distinct",
    "union",
    "sql_query",
    "python_udf",
]


@st.composite
def workflows(draw: st.DrawFn) -> list[dict[str, Any]]:
    operators: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        ids = [op["operator_id"] for op in operators]
        kind = draw(st.sampled_from(KINDS if ids else KINDS[:3]))
        arity = 0 if kind.endswith("_source") else 2 if kind == "join" else 1
        if kind in {"union", "sql_query"}:
            arity = draw(st.integers(1, 2))
        inputs = (
            draw(st.lists(st.sampled_from([*ids] * 9 + ["ghost"]), min_size=arity, max_size=arity))
            if ids
            else []
        )
        operators.append(
            {
                "operator_id": draw(operator_ids(len(operators))),
                "input_operator_ids": inputs,
                "materialize": draw(st.booleans()),
                kind: draw(settings_of(kind, inputs)),
            }
        )
    operators[-1]["materialize"] = True
    return operators


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_spark()
    # Warm the JVM up (a first analysis or file listing takes seconds), so that the deadline
    # below measures the checks, not the start.
    compile_flow(session, WARM_UP)
    yield session
    session.stop()


WARM_UP: list[dict[str, Any]] = [
    {"operator_id": "f", "file_source": {"format": "FILE_FORMAT_CSV", "path": PATHS[2]}},
    {
        "operator_id": "q",
        "input_operator_ids": ["f"],
        "sql_query": {"query": "SELECT * FROM f WHERE _c0 IS NOT NULL"},
        "materialize": True,
    },
]


def refusal_of(spark: SparkSession, operators: list[dict[str, Any]]) -> ServiceError | None:
    """The error the workflow is refused with; None when it compiles."""
    try:
        compile_flow(spark, operators)
    except ServiceError as error:
        return error
    return None


@pytest.mark.timeout(110, func_only=True)
@settings(
    max_examples=40,
    deadline=timedelta(seconds=60),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operators=workflows())
def test_any_workflow_is_accepted_or_refused_naming_a_field(
    spark: SparkSession, operators: list[dict[str, Any]]
) -> None:
    error = refusal_of(spark, operators)
    if error is not None:
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT, error.message
        assert error.violations
        assert all(v.field.startswith("workflow") for v in error.violations)
        assert not any("\tat " in v.description for v in error.violations)


@pytest.mark.timeout(170, func_only=True)  # the stack's start is not the test's
@settings(
    max_examples=6,
    deadline=timedelta(seconds=90),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operators=workflows())
def test_any_workflow_submitted_to_the_stack_ends_well(
    stack: Stack, user_with_warehouse: tuple[UnitClient, str], operators: list[dict[str, Any]]
) -> None:
    client, warehouse_id = user_with_warehouse
    submitted = submission(client, warehouse_id, operators)
    if isinstance(submitted, grpc.RpcError):
        assert submitted.code() == grpc.StatusCode.INVALID_ARGUMENT, submitted.details()
        assert bad_fields(submitted)
        return
    final = client.finish(submitted.execution_id, timeout=80)
    assert state_name(final) in {"SUCCEEDED", "FAILED"}, final
    if state_name(final) == "FAILED":
        assert final.error.message
        assert not final.error.message.startswith("An exception was thrown from the Python worker")


def submission(
    client: UnitClient, warehouse_id: str, operators: list[dict[str, Any]]
) -> execution_pb2.Execution | grpc.RpcError:
    """The execution a submission started, or the error it was refused with."""
    try:
        return client.submit(warehouse_id, workflow(operators))
    except grpc.RpcError as error:
        return error


@pytest.fixture(scope="module")
def user_with_warehouse(stack: Stack) -> tuple[UnitClient, str]:
    client, warehouse_id, _ = new_user(stack, "fuzzer")
    return client, warehouse_id
