"""The computing unit's one long-lived SparkSession, started once with the process.

Executions get their own sessions from it (SparkSession.newSession: private
temporary views and SQL settings) and share its SparkContext, so Spark
schedules their jobs side by side (FAIR scheduling) and each can be cancelled
by its job group.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from cu_service.settings import ComputingUnitSettings
from cu_service.workflow.reach import Reach
from service_runtime.config import ConfigError

log = logging.getLogger("cu_service.spark")


#: The session time zone: Spark hands timestamps to Python (mapInArrow) as UTC.
SESSION_TIME_ZONE = "UTC"


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a DataFrame's batches in mapInArrow (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone=SESSION_TIME_ZONE)


def start_spark(settings: ComputingUnitSettings) -> SparkSession:
    """Starts Spark (a JVM) for this unit; ConfigError says plainly when Java is missing."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ConfigError(
            "PySpark needs Java 17 or newer and there is no java on PATH "
            "(on Debian or Ubuntu: sudo apt-get install openjdk-17-jre-headless)"
        )
    # Spark's Python workers must run this interpreter, with this environment's packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    cores = os.cpu_count() or 2
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(f"texera-lake-{settings.computing_unit_id}")
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.session.timeZone", SESSION_TIME_ZONE)
        .config("spark.sql.shuffle.partitions", str(cores * 2))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Users' SQL reads only the workflow's inputs: no `format`.`path` tables.
        .config("spark.sql.runSQLOnFiles", "false")
    )
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM did not come up: say so in one line
        raise ConfigError(f"Spark could not start: {str(exc).splitlines()[0]}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    Reach(spark).seal_functions()
    # PySpark logs every analysis error with its JVM stack trace; executions report them instead.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one DEBUG line per JVM call otherwise
    log.info("spark started", extra={"master": settings.spark_master, "version": spark.version})
    return spark
