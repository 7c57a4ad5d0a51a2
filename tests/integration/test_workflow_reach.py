"""What users' SQL, expressions and file sources may reach, checked on a real SparkSession."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from cu_service.workflow.file_roots import EXAMPLES, FileRoots, OutsideRoots
from lake_cli.executions import load_workflow
from tests.integration.compile import compile_flow, refusal, rows

pytestmark = pytest.mark.integration

SOURCE: dict[str, Any] = {
    "operator_id": "src",
    "inline_source": {
        "columns": [{"name": "k", "data_type": "int"}, {"name": "v", "data_type": "string"}],
        "rows": [[1, "a"], [2, "b"], [2, "c"]],
    },
}
OTHER: dict[str, Any] = {"operator_id": "other", "range_source": {"end": 3}}


def sql(query: str, inputs: tuple[str, ...] = ("src",)) -> list[dict[str, Any]]:
    return [
        SOURCE,
        OTHER,
        {
            "operator_id": "q",
            "input_operator_ids": list(inputs),
            "sql_query": {"query": query},
            "materialize": True,
        },
    ]


def refused_field(spark: SparkSession, operators: list[dict[str, Any]]) -> dict[str, str]:
    error = refusal(spark, operators)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    return {v.field: v.description for v in error.violations}


QUERY = "workflow.operators[2].sql_query.query"
REACHING_QUERIES = {
    "reflect": "SELECT reflect('java.lang.System', 'getProperty', 'user.name')",
    "mixed case": "select ReFlEcT('java.lang.System', 'getenv', 'PATH')",
    "comment inside": "SELECT /* hi */ java_method('java.lang.System', /* x */ 'getenv', 'X')",
    "quoted name": "SELECT `reflect`('java.lang.System', 'getenv', 'X')",
    "qualified name": "SELECT system.builtin.reflect('java.lang.System', 'getenv', 'X')",
    "nested subquery": "SELECT k FROM src WHERE v IN (SELECT try_reflect('a', 'b'))",
    "values": "SELECT * FROM VALUES (reflect('java.lang.System', 'getenv', 'X')) AS t(x)",
    "lateral view": "SELECT * FROM src LATERAL VIEW explode(array(java_method('a', 'b'))) t AS c",
    "file table": "SELECT value FROM text.`/etc/hostname`",
    "file table in a cte": "WITH c AS (SELECT * FROM text.`/etc/hostname`) SELECT * FROM c",
    "identifier": "SELECT * FROM IDENTIFIER('text.`/etc/hostname`')",
    "identifier built": "SELECT * FROM IDENTIFIER('te' || 'xt.`/etc/hostname`')",
    "file paths": "SELECT input_file_name(), input_file_block_start() FROM src",
    "host user": "SELECT current_user()",
    "worker logs": "SELECT * FROM python_worker_logs()",
    "script": "SELECT TRANSFORM(k) USING 'cat /etc/hostname' AS (line) FROM src",
    "global view": "SELECT * FROM global_temp.anything",
    "catalog table": "SELECT * FROM spark_catalog.default.anything",
    "not an input": "SELECT * FROM other",
    "ddl": "CREATE TEMPORARY VIEW v AS SELECT * FROM src",
    "drop": "DROP TABLE src",
    "insert": "INSERT INTO src VALUES (3, 'd')",
    "set": "SET spark.sql.runSQLOnFiles=true",
    "cache": "CACHE TABLE src",
    "two statements": "SELECT * FROM src; DROP TABLE src",
    "escape the wrapper": "SELECT 1) AS x; SELECT reflect('a', 'b'",
}


@pytest.mark.parametrize("query", REACHING_QUERIES.values(), ids=REACHING_QUERIES.keys())
def test_sql_reaching_past_its_inputs_is_refused(spark: SparkSession, query: str) -> None:
    found = refused_field(spark, sql(query))
    assert list(found) == [QUERY]
    assert "operator 'q'" in found[QUERY]


def test_refusals_say_what_is_not_allowed(spark: SparkSession) -> None:
    assert (
        "reflect is not available: it calls into the JVM"
        in refused_field(spark, sql("SELECT REFLECT('java.lang.System', 'getenv', 'X')"))[QUERY]
    )
    assert (
        "only the operator's inputs may be named"
        in refused_field(spark, sql("SELECT * FROM json.`/etc/passwd`"))[QUERY]
    )
    assert "must be one query" in refused_field(spark, sql("DROP TABLE src"))[QUERY]
    assert (
        "TRANSFORM is not available"
        in refused_field(spark, sql("SELECT TRANSFORM(k) USING 'id' AS (x) FROM src"))[QUERY]
    )


@pytest.mark.parametrize(
    ("operator", "field"),
    [
        ({"filter": {"condition": "reflect('a', 'b') IS NULL"}}, "filter.condition"),
        (
            {"filter": {"condition": "v IN (SELECT value FROM text.`/etc/hostname`)"}},
            "filter.condition",
        ),
        ({"filter": {"condition": "k > (SELECT count(*) FROM other)"}}, "filter.condition"),
        (
            {"projection": {"columns": [{"expression": "k"}, {"expression": "input_file_name()"}]}},
            "projection.columns[1].expression",
        ),
        (
            {"projection": {"columns": [{"expression": "(SELECT max(java_method('a', 'b')))"}]}},
            "projection.columns[0].expression",
        ),
    ],
    ids=["function", "file subquery", "other operator", "file name", "subquery function"],
)
def test_expressions_reaching_past_their_input_are_refused(
    spark: SparkSession, operator: dict[str, Any], field: str
) -> None:
    flow = [
        SOURCE,
        OTHER,
        {"operator_id": "e", "input_operator_ids": ["src"], "materialize": True, **operator},
    ]
    assert list(refused_field(spark, flow)) == [f"workflow.operators[2].{field}"]


@pytest.mark.parametrize(
    "condition",
    [
        "(" * 3000 + "k > 1" + ")" * 3000,
        "k IN " + "(SELECT id FROM range(1) WHERE id IN " * 150 + "(SELECT 1)" + ")" * 150,
    ],
    ids=["deep parentheses", "deep subqueries"],
)
def test_text_too_deep_to_check_is_refused(spark: SparkSession, condition: str) -> None:
    flow = [
        SOURCE,
        {
            "operator_id": "e",
            "input_operator_ids": ["src"],
            "filter": {"condition": condition},
            "materialize": True,
        },
    ]
    assert list(refused_field(spark, flow)) == ["workflow.operators[1].filter.condition"]


def test_bad_expressions_name_their_field(spark: SparkSession) -> None:
    flow = [
        SOURCE,
        {
            "operator_id": "p",
            "input_operator_ids": ["src"],
            "projection": {"columns": [{"expression": "k"}, {"expression": "nope + 1"}]},
            "materialize": True,
        },
    ]
    found = refused_field(spark, flow)
    assert "nope" in found["workflow.operators[1].projection.columns[1].expression"]


LEGITIMATE = {
    "join and aggregate": (
        "SELECT a.k, count(*) AS n FROM src a JOIN src b ON a.k = b.k GROUP BY a.k ORDER BY a.k",
        [{"k": 1, "n": 1}, {"k": 2, "n": 4}],
    ),
    "window": (
        "SELECT v, row_number() OVER (PARTITION BY k ORDER BY v) AS r FROM src ORDER BY v",
        [{"v": "a", "r": 1}, {"v": "b", "r": 1}, {"v": "c", "r": 2}],
    ),
    "cte over inputs": (
        "WITH twos AS (SELECT * FROM src WHERE k = 2) SELECT count(*) AS n FROM twos",
        [{"n": 2}],
    ),
    "values and a trailing comment": (
        "SELECT * FROM VALUES (1, 'x') AS t(a, b) -- spelled out",
        [{"a": 1, "b": "x"}],
    ),
    "recursive cte": (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
        "SELECT n FROM r ORDER BY n",
        [{"n": 1}, {"n": 2}, {"n": 3}],
    ),
    "lateral view and table": (
        "SELECT c FROM (TABLE src) LATERAL VIEW explode(array(k)) t AS c WHERE v = 'a'",
        [{"c": 1}],
    ),
    "subquery and range": (
        "SELECT id FROM range(5) WHERE id IN (SELECT k FROM src) ORDER BY id",
        [{"id": 1}, {"id": 2}],
    ),
    "two inputs": ("SELECT count(*) AS n FROM src, other", [{"n": 9}]),
    "functions": (
        "SELECT upper(v) AS u, xpath_string('<a>b</a>', '/a') AS x FROM src WHERE k = 1",
        [{"u": "A", "x": "b"}],
    ),
}


@pytest.mark.parametrize(("query", "expected"), LEGITIMATE.values(), ids=LEGITIMATE.keys())
def test_legitimate_sql_over_inputs_runs(
    spark: SparkSession, query: str, expected: list[dict[str, Any]]
) -> None:
    inputs = ("src", "other") if "other" in query else ("src",)
    assert rows(compile_flow(spark, sql(query, inputs)), "q") == expected


def test_sql_inputs_are_seen_only_by_their_operator(spark: SparkSession) -> None:
    flow = [
        SOURCE,
        OTHER,
        {
            "operator_id": "first",
            "input_operator_ids": ["other"],
            "sql_query": {"query": "TABLE other"},
        },
        {
            "operator_id": "second",
            "input_operator_ids": ["src"],
            "sql_query": {"query": "SELECT * FROM other"},
            "materialize": True,
        },
    ]
    assert "workflow.operators[3].sql_query.query" in refused_field(spark, flow)


def test_no_session_of_the_unit_calls_into_the_jvm_or_reads_files(spark: SparkSession) -> None:
    for session in (spark, spark.newSession(), spark.newSession().newSession()):
        assert session.conf.get("spark.sql.runSQLOnFiles") == "false"
        for query in (
            "SELECT reflect('java.lang.System', 'getProperty', 'user.name')",
            "SELECT java_method('java.lang.System', 'getenv', 'PATH')",
            "SELECT * FROM text.`/etc/hostname`",
            "SELECT * FROM python_worker_logs()",
        ):
            with pytest.raises(PySparkException):
                session.sql(query).collect()
    assert spark.newSession().sql("SELECT upper('still here') AS u").collect()[0].u == "STILL HERE"


# File sources ------------------------------------------------------------------------


@pytest.fixture
def roots(tmp_path: Path) -> tuple[FileRoots, Path, Path]:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "a.csv").write_text("x\n1\n2\n")
    (allowed / "b.csv").write_text("x\n3\n")
    (outside / "secret.csv").write_text("x\n42\n")
    return FileRoots([allowed]), allowed, outside


def files(path: str) -> list[dict[str, Any]]:
    return [
        {
            "operator_id": "f",
            "file_source": {"format": "FILE_FORMAT_CSV", "path": path, "csv_header": True},
            "materialize": True,
        }
    ]


def test_file_sources_read_real_files_under_the_roots(
    spark: SparkSession, roots: tuple[FileRoots, Path, Path]
) -> None:
    allowed_roots, allowed, _ = roots
    compiled = compile_flow(spark, files(f"{allowed}/*.csv"), allowed_roots)
    assert sorted(int(r["x"]) for r in rows(compiled, "f")) == [1, 2, 3]
    assert compiled.files["f"].paths == (f"{allowed}/a.csv", f"{allowed}/b.csv")


def test_the_default_root_is_the_shipped_examples_folder(spark: SparkSession) -> None:
    compiled = compile_flow(spark, files(str(EXAMPLES / "orders.csv")))
    assert [r["region"] for r in rows(compiled, "f")] == ["west", "east", "west"]
    assert "/etc/hostname" not in str(FileRoots.from_setting(""))


@pytest.mark.parametrize(
    "path",
    [
        "/etc/hostname",
        "{allowed}/../outside/secret.csv",
        "file://{outside}/secret.csv",
        "file:{allowed}/a.csv",
        "s3a://bucket/key.csv",
        "{allowed}/link.csv",
        "{allowed}/*.csv",
        "{allowed}/linked",
        "{allowed}{{,/../outside}}/*.csv",
        "{allowed}/missing.csv",
        "relative.csv",
    ],
    ids=[
        "outside",
        "dot dot",
        "file url",
        "file scheme",
        "other scheme",
        "symlink out",
        "glob over a symlink out",
        "folder with a symlink out",
        "hadoop alternatives",
        "nothing there",
        "relative",
    ],
)
def test_file_sources_outside_the_roots_are_refused(
    spark: SparkSession, roots: tuple[FileRoots, Path, Path], path: str
) -> None:
    allowed_roots, allowed, outside = roots
    (allowed / "link.csv").symlink_to(outside / "secret.csv")
    (allowed / "linked").mkdir()
    (allowed / "linked" / "in.csv").symlink_to(outside / "secret.csv")
    error = refusal(spark, files(path.format(allowed=allowed, outside=outside)), allowed_roots)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in error.violations] in (
        ["workflow.operators[0].file_source.path"],
        ["workflow.operators[0].file_source.path", "workflow.operators[0].file_source.path"],
    )


def test_a_file_swapped_for_a_symlink_after_submission_is_caught(
    roots: tuple[FileRoots, Path, Path],
) -> None:
    allowed_roots, allowed, outside = roots
    resolved = allowed_roots.resolve(f"{allowed}/a.csv")
    resolved.recheck()
    os.remove(allowed / "a.csv")
    (allowed / "a.csv").symlink_to(outside / "secret.csv")
    with pytest.raises(OutsideRoots):
        resolved.recheck()


def test_the_shipped_example_still_runs(spark: SparkSession) -> None:
    flow = json_format.MessageToDict(
        load_workflow(EXAMPLES / "sales.yaml"), preserving_proto_field_name=True
    )
    compiled = compile_flow(spark, flow["operators"])
    ranked = rows(compiled, "ranked")
    assert [r["region"] for r in ranked][:1] == ["south"]
    assert {r["tier"] for r in ranked} <= {"large", "small"}


# Inline values ------------------------------------------------------------------------


def test_inline_decimals_take_up_to_38_digits(spark: SparkSession) -> None:
    flow = [
        {
            "operator_id": "wide",
            "inline_source": {
                "columns": [
                    {"name": "whole", "data_type": "decimal(38,0)"},
                    {"name": "fraction", "data_type": "decimal(38,37)"},
                ],
                "rows": [["9" * 38, "0." + "1" * 37]],
            },
            "materialize": True,
        }
    ]
    [row] = rows(compile_flow(spark, flow), "wide")
    assert str(row["whole"]) == "9" * 38
    assert str(row["fraction"]) == "0." + "1" * 37


@pytest.mark.parametrize(
    ("data_type", "value"),
    [("decimal(38,0)", "1" * 39), ("date", "10000-01-01"), ("timestamp", "0001-01-01T00:00+01:00")],
    ids=["decimal beyond 38 digits", "date past 9999", "timestamp before year 1"],
)
def test_inline_values_a_table_cannot_hold_are_refused_naming_the_column(
    spark: SparkSession, data_type: str, value: str
) -> None:
    flow = [
        {
            "operator_id": "bad",
            "inline_source": {
                "columns": [{"name": "c", "data_type": data_type}],
                "rows": [[None], [value]],
            },
            "materialize": True,
        }
    ]
    found = refused_field(spark, flow)
    assert "row 1, column 'c'" in found["workflow.operators[0].inline_source.rows[1]"]
