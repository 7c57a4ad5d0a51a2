"""Limits a workflow meets at submission, and the failures that name limits met while running."""

from __future__ import annotations

import multiprocessing
import os
import resource
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from cu_service.resource_limits import RESULT_BYTES_MARKER, RunLimits
from cu_service.worker_daemon import Confinement
from cu_service.workflow.limits import WorkflowLimits, check_limits, nesting_depth, plan_problem
from service_runtime.errors import ServiceError
from service_runtime.processes import ensure_system_user
from texera.lake.v1 import workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings

SETTINGS = ComputingUnitSettings(
    max_operators=4,
    max_source_partitions=8,
    max_range_rows=1000,
    max_inline_rows=2,
    max_inline_bytes=200,
    max_expression_chars=50,
    max_expression_depth=3,
)
LIMITS = WorkflowLimits.of(SETTINGS)


def flow(*operators: dict[str, Any]) -> workflow_pb2.Workflow:
    return json_format.ParseDict({"operators": list(operators)}, workflow_pb2.Workflow())


def over(workflow: workflow_pb2.Workflow) -> dict[str, str]:
    with pytest.raises(ServiceError) as raised:
        check_limits(workflow, LIMITS)
    return {v.field: v.description for v in raised.value.violations}


def numbers(**source: Any) -> dict[str, Any]:
    return {"operator_id": "n", "range_source": {"end": 10, **source}}


def test_a_workflow_within_the_limits_passes() -> None:
    check_limits(
        flow(
            numbers(partitions=8, end=1000),
            {"operator_id": "f", "filter": {"condition": "((id > 1))"}},
            {"operator_id": "s", "sql_query": {"query": "SELECT '((((((' AS x -- ((((\n"}},
        ),
        LIMITS,
    )


@pytest.mark.parametrize(
    ("source", "field", "setting"),
    [
        ({"partitions": 2**31 - 1}, "range_source.partitions", "MAX_SOURCE_PARTITIONS"),
        ({"end": 1001}, "range_source.end", "MAX_RANGE_ROWS"),
        # 2^64 rows: more than len(range(...)) can count.
        ({"start": -(2**63), "end": 2**63 - 1}, "range_source.end", "MAX_RANGE_ROWS"),
        ({"start": 5000, "end": 0, "step": -4}, "range_source.end", "MAX_RANGE_ROWS"),
    ],
)
def test_range_sources_are_bounded(source: dict[str, Any], field: str, setting: str) -> None:
    problems = over(flow(numbers(**source)))
    assert list(problems) == [f"workflow.operators[0].{field}"]
    assert f"TEXERA_LAKE_CU_{setting}" in problems[f"workflow.operators[0].{field}"]
    assert "operator 'n'" in problems[f"workflow.operators[0].{field}"]


def test_inline_sources_are_bounded_in_rows_and_bytes() -> None:
    def inline(rows: list[list[Any]]) -> dict[str, Any]:
        columns = [{"name": "s", "data_type": "string"}]
        return {"operator_id": "i", "inline_source": {"columns": columns, "rows": rows}}

    assert (
        "MAX_INLINE_ROWS"
        in over(flow(inline([["a"], ["b"], ["c"]])))["workflow.operators[0].inline_source.rows"]
    )
    assert (
        "MAX_INLINE_BYTES"
        in over(flow(inline([["x" * 300]])))["workflow.operators[0].inline_source.rows"]
    )


def test_too_many_operators_are_refused_before_anything_else_is_looked_at() -> None:
    problems = over(flow(*[numbers(partitions=10**6) | {"operator_id": f"n{i}"} for i in range(5)]))
    assert list(problems) == ["workflow.operators"]
    assert "TEXERA_LAKE_CU_MAX_OPERATORS" in problems["workflow.operators"]


def test_expressions_are_bounded_in_length_and_nesting() -> None:
    problems = over(
        flow(
            numbers(),
            {"operator_id": "f", "filter": {"condition": "id = 1 OR " * 10 + "true"}},
            {"operator_id": "p", "projection": {"columns": [{"expression": "[{((id))}]"}]}},
            {
                "operator_id": "a",
                "aggregate": {"aggregations": [{"column": "c" * 51, "alias": "x"}]},
            },
        )
    )
    assert "MAX_EXPRESSION_CHARS" in problems["workflow.operators[1].filter.condition"]
    assert (
        "MAX_EXPRESSION_DEPTH" in problems["workflow.operators[2].projection.columns[0].expression"]
    )
    assert (
        "MAX_EXPRESSION_CHARS" in problems["workflow.operators[3].aggregate.aggregations[0].column"]
    )


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("id > 1", 0),
        ("f(g(x), [1, 2])", 2),
        ("CASE WHEN a THEN CASE WHEN b THEN 1 END END", 2),
        ("'(((' || \"(((\" || `(((` /* ((( */ -- (((\n", 0),
        ("weekend > 1 AND casework = 2", 0),  # words that merely contain CASE or END
        ("((x)", 2),  # unbalanced: Spark refuses it; the depth is still bounded
        ("'unterminated ((((", 0),
    ],
)
def test_nesting_depth_skips_quoted_text_and_comments(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


PLAN = "org.apache.spark.sql.catalyst.plans.logical."


@pytest.mark.parametrize(
    ("node", "setting"),
    [
        (
            {"class": PLAN + "Range", "start": 0, "end": 10, "step": 1, "numSlices": 9},
            "MAX_SOURCE_PARTITIONS",
        ),
        ({"class": PLAN + "Range", "start": 0, "end": 10**12, "step": 1}, "MAX_RANGE_ROWS"),
        ({"class": PLAN + "Repartition", "numPartitions": 2**31 - 1}, "MAX_SOURCE_PARTITIONS"),
        (
            {"class": PLAN + "RepartitionByExpression", "optNumPartitions": 100},
            "MAX_SOURCE_PARTITIONS",
        ),
        ({"class": PLAN + "Range", "start": 0, "end": 10, "step": 1, "numSlices": 8}, None),
        ({"class": PLAN + "RepartitionByExpression", "partitionExpressions": []}, None),
        ({"class": PLAN + "Project", "numPartitions": 10**6}, None),
    ],
)
def test_analyzed_sql_plans_are_held_to_the_same_limits(
    node: dict[str, Any], setting: str | None
) -> None:
    problem = plan_problem([{"class": PLAN + "Project"}, node], LIMITS)
    if setting is None:
        assert problem is None
    else:
        assert problem is not None
        assert f"TEXERA_LAKE_CU_{setting}" in problem


def test_failures_name_the_limit_they_went_over() -> None:
    limits = RunLimits(SETTINGS)
    memory = limits.found_in("…", "hog", "MemoryError: ")
    assert memory is not None
    assert memory.operator_id == "hog"
    assert "TEXERA_LAKE_CU_WORKER_MEMORY_BYTES" in str(memory)
    jvm = limits.found_in("Py4JJavaError: ... java.lang.OutOfMemoryError: Java heap space")
    assert jvm is not None
    assert "TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY" in str(jvm)
    written = limits.found_in(f"PythonException: ... {RESULT_BYTES_MARKER} a task wrote ...")
    assert written is not None
    assert "TEXERA_LAKE_CU_MAX_RESULT_BYTES" in str(written)
    assert "TEXERA_LAKE_CU_MAX_RUN_SECONDS" in limits.run_time_exceeded()
    assert limits.found_in("AnalysisException: no such column") is None
    # Python's MemoryError outside the function's own report still names the operator written.
    bare = limits.found_in("PythonException: ... MemoryError\n", "hog")
    assert bare is not None
    assert bare.operator_id == "hog"
    assert "TEXERA_LAKE_CU_WORKER_MEMORY_BYTES" in str(bare)
    spark = limits.found_in("org.apache.spark.memory.SparkOutOfMemoryError: no memory")
    assert spark is not None
    assert "TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY" in str(spark)
    assert limits.found_in("…", "udf", "ZeroDivisionError: division by zero") is None
    for error in (
        "BlockingIOError: [Errno 11] Resource temporarily unavailable",
        "RuntimeError: can't start new thread",
    ):
        forks = limits.found_in("…", "bomb", error)
        assert forks is not None
        assert forks.operator_id == "bomb"
        assert "process limit" in str(forks)
        assert "TEXERA_LAKE_CU_WORKER_PROCESSES" in str(forks)


def _confined(confinement: str, secret: str, seen: Any) -> None:
    Confinement.decode(confinement).apply()
    try:
        with open(secret) as file:
            readable = bool(file.read())
    except PermissionError:
        readable = False
    seen.put(
        (
            resource.getrlimit(resource.RLIMIT_AS),
            resource.getrlimit(resource.RLIMIT_NOFILE),
            os.getuid(),
            readable,
        )
    )


def _in_a_child(confinement: Confinement, secret: Path) -> tuple[Any, ...]:
    """What a forked child sees once confined (its modules are loaded already, as a forked
    worker's are)."""
    context = multiprocessing.get_context("fork")
    seen = context.Queue()
    child = context.Process(target=_confined, args=(confinement.encode(), str(secret), seen))
    child.start()
    child.join(30)
    return tuple(seen.get(timeout=5))


def test_the_confinement_sets_the_workers_limits(tmp_path: Path) -> None:
    confinement = Confinement(memory_bytes=3 * 1024**3, open_files=64, processes=10, user=None)
    assert Confinement.decode(confinement.encode()) == confinement
    secret = tmp_path / "secret"
    secret.write_text("x")
    memory, files, uid, _ = _in_a_child(confinement, secret)
    assert memory == (3 * 1024**3,) * 2
    assert files == (64, 64)
    assert uid == os.getuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch users")
def test_a_confined_worker_of_a_root_unit_runs_as_its_own_user(tmp_path: Path) -> None:
    entry = ensure_system_user(SETTINGS.worker_user)
    secret = tmp_path / "root-only"
    secret.write_text("not for workers")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    confinement = Confinement(
        memory_bytes=3 * 1024**3,
        open_files=64,
        processes=64,
        user=(entry.pw_uid, entry.pw_gid, entry.pw_dir),
    )
    assert Confinement.decode(confinement.encode()) == confinement
    _, _, uid, readable = _in_a_child(confinement, secret)
    assert uid == entry.pw_uid != 0
    assert readable is False
