"""A unit's Spark, as it starts it: its JVM gets the options that make an idle JVM give memory
back, and the writer's Python stages share one worker daemon, whose Arrow memory comes from
jemalloc as the driver's does."""

from __future__ import annotations

import psutil
import pytest
from pyspark.sql import SparkSession

from cu_service import arrow_memory
from cu_service.warm_up import run_once
from tests.integration.spark_processes import python_daemons, spark_jvms

pytestmark = pytest.mark.integration


def test_the_jvm_gives_memory_back_and_the_writer_uses_one_daemon(spark: SparkSession) -> None:
    run_once(spark)  # a write job: its mapInArrow, and the RDD that gathers what it wrote
    [jvm] = spark_jvms(psutil.Process())
    command = jvm.cmdline()
    assert "-XX:G1PeriodicGCInterval=30000" in command
    assert "-XX:TrimNativeHeapInterval=30000" in command
    daemons = python_daemons(jvm)
    assert len(daemons) == 1
    assert daemons[0].environ().get(arrow_memory.VARIABLE) == arrow_memory.ALLOCATOR
