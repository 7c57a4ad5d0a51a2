"""Compiling workflows on a real SparkSession, as a computing unit does at submission."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from pyspark.sql import SparkSession

from cu_service.spark import start_spark
from cu_service.workflow.compiler import CompiledWorkflow, WorkflowCompiler
from cu_service.workflow.file_roots import FileRoots
from cu_service.workflow.udf import ConsoleParam
from service_runtime.errors import ServiceError
from texera.lake.v1 import workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings


def compile_flow(
    spark: SparkSession, operators: list[dict[str, Any]], roots: FileRoots | None = None
) -> CompiledWorkflow:
    flow = json_format.ParseDict({"operators": operators}, workflow_pb2.Workflow())
    console = spark.sparkContext.accumulator([], ConsoleParam())
    return WorkflowCompiler(
        spark.newSession(),
        console,
        lambda index, op: None,  # type: ignore[arg-type,return-value]
        roots or FileRoots.from_setting(""),
    ).compile(flow)


def refusal(
    spark: SparkSession, operators: list[dict[str, Any]], roots: FileRoots | None = None
) -> ServiceError:
    with pytest.raises(ServiceError) as raised:
        compile_flow(spark, operators, roots)
    return raised.value


def rows(compiled: CompiledWorkflow, operator_id: str) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in compiled.frames[operator_id].collect()]


def local_spark() -> SparkSession:
    """A small Spark of the unit's own making (its settings and defences)."""
    return start_spark(ComputingUnitSettings(spark_master="local[2]", spark_driver_memory="1g"))
