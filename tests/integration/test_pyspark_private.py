"""What the computing unit takes from PySpark's private API (cu_service.pyspark_private), pinned
on a real SparkSession: when PySpark moves, these say whether the adapter still holds."""

from __future__ import annotations

import json

import psutil
import pytest
from pyspark import __version__ as pyspark_version
from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

from cu_service import pyspark_private
from cu_service.warm_up import run_once
from tests.integration.spark_processes import python_daemons, spark_jvms

pytestmark = pytest.mark.integration


def test_the_adapter_was_checked_against_the_installed_pyspark() -> None:
    """When this fails, PySpark moved: run this module, then move the pin."""
    assert pyspark_version == pyspark_private.PYSPARK_VERSION


def test_ddl_types_parse(spark: SparkSession) -> None:
    assert pyspark_private.parse_type("array<int>") == ArrayType(IntegerType())
    assert pyspark_private.parse_type("a int, b string") == StructType(
        [StructField("a", IntegerType()), StructField("b", StringType())]
    )


def test_a_dataframe_shows_its_analyzed_plan(spark: SparkSession) -> None:
    frame = spark.range(3).selectExpr("id + 1 AS next")
    plan = pyspark_private.analyzed_plan(frame)
    nodes = json.loads(plan.toJSON())
    assert nodes[0]["class"] == "org.apache.spark.sql.catalyst.plans.logical.Project"


def test_the_session_shows_its_jvm_and_state(spark: SparkSession) -> None:
    jvm = pyspark_private.jvm(spark)
    assert jvm.scala.Option.apply("x").isDefined()
    state = pyspark_private.session_state(spark)
    parsed = state.sqlParser().parseExpression("1 + 1")
    assert "Add" in parsed.getClass().getName()
    option = jvm.scala.Option.apply
    abs_function = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(
        "abs", option("builtin"), option("system")
    )
    assert state.functionRegistry().functionExists(abs_function)


def test_a_class_is_named_at_once(spark: SparkSession) -> None:
    create_array = pyspark_private.java_class(
        spark, "org.apache.spark.sql.catalyst.expressions.CreateArray"
    )
    one = pyspark_private.session_state(spark).sqlParser().parseExpression("1")
    array = create_array(pyspark_private.jvm(spark).PythonUtils.toSeq([one]), False)
    assert array.getClass().getName().endswith(".CreateArray")
    assert json.loads(array.toJSON())[1]["class"].endswith(".Literal")


def test_some_partitions_of_a_frame_are_collected(spark: SparkSession) -> None:
    frame = spark.range(0, 12, 1, 4).selectExpr("id * 2 AS doubled")
    rows = pyspark_private.pickled_rows(frame)
    assert rows.getNumPartitions() == 4
    collected = pyspark_private.collect_partitions(frame, rows, [1, 3])
    assert [row.doubled for row in collected] == [6, 8, 10, 18, 20, 22]
    assert pyspark_private.collect_partitions(frame, rows, []) == []


def test_the_python_daemons_stop_and_the_next_task_starts_one(spark: SparkSession) -> None:
    [jvm] = spark_jvms(psutil.Process())
    run_once(spark)  # a Python stage: the daemon starts, its workers stay for the next task
    [daemon] = python_daemons(jvm)
    assert pyspark_private.stop_python_daemons(spark) == 1
    daemon.wait(30)  # raises if it is still there
    assert python_daemons(jvm) == []
    run_once(spark)
    assert len(python_daemons(jvm)) == 1
