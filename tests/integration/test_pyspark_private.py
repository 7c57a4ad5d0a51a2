"""What the computing unit takes from PySpark's private API (cu_service.pyspark_private), pinned
on a real SparkSession: when PySpark moves, these say whether the adapter still holds."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pyarrow as pa
import pytest
from pyspark import SparkContext
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


def _spin(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import time  # noqa: PLC0415 - the task runs in a worker that cannot import this module

    time.sleep(600)
    yield from batches


def test_a_fair_pool_is_made_once(spark: SparkSession) -> None:
    context = spark.sparkContext
    pyspark_private.fair_pool(context, "fair-once")
    pyspark_private.fair_pool(context, "fair-once")
    root = context._jsc.sc().taskScheduler().rootPool()
    pool = root.getSchedulableByName("fair-once")
    assert pool.schedulingMode().toString() == "FAIR"
    assert _names(root).count("fair-once") == 1


def _names(root: Any) -> list[str]:
    pools = root.schedulableQueue().iterator()
    names = []
    while pools.hasNext():
        names.append(pools.next().name())
    return names


def test_running_attempts_are_seen_and_one_is_killed_without_failing_its_job(
    spark: SparkSession,
) -> None:
    context = spark.sparkContext
    pyspark_private.fair_pool(context, "spinning")
    failed: list[BaseException] = []

    def spin() -> None:
        context.setJobGroup("spinning", "spinning", interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", "spinning")
        try:
            spark.range(0, 2, 1, 2).mapInArrow(_spin, "id long").collect()
        except BaseException as exc:  # cancelled at the end, as expected
            failed.append(exc)

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        stage = _stage_running(context, "spinning", attempts=2)
        attempts = pyspark_private.running_attempts(context, stage)
        assert len(attempts) == 2
        task_id = max(attempts, key=lambda a: a[1])[0]
        assert pyspark_private.kill_task_attempt(context, task_id, "preempted")
        # Run again as a new attempt: the job goes on.
        again = _stage_running(context, "spinning", attempts=2, besides=task_id)
        assert again.stage_id == stage.stage_id
        assert not failed
    finally:
        context.cancelJobGroup("spinning")
        thread.join(60)


def _stage_running(
    context: SparkContext, pool: str, attempts: int, besides: int = -1
) -> pyspark_private.ActiveStage:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for stage in pyspark_private.active_stages(context):
            running = pyspark_private.running_attempts(context, stage)
            ids = {task_id for task_id, _ in running}
            if stage.pool == pool and len(ids - {besides}) == attempts:
                return stage
        time.sleep(0.2)
    raise AssertionError(f"no stage of pool {pool} with {attempts} running attempts")
