"""The one adapter to PySpark's private API: the JVM side of a session and of a DataFrame (their
py4j objects, for Catalyst's plans and registries), the DDL type parser, jobs that collect
some partitions of a DataFrame's rows and the stopping of the Python worker daemons; checked
against PYSPARK_VERSION (a unit test fails when the installed version moves, so these are
looked at again)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from py4j.java_gateway import JavaClass
from pyspark import SparkConf, SparkContext
from pyspark.core.rdd import _load_from_socket  # type: ignore[attr-defined]
from pyspark.serializers import BatchedSerializer, CPickleSerializer
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import DataType, _parse_datatype_string

#: The PySpark release these helpers were checked against.
PYSPARK_VERSION = "4.3.0"


def parse_type(text: str) -> DataType:
    """A Spark SQL type from its DDL text ("int", "array<string>", "a int, b string")."""
    return _parse_datatype_string(text)


def analyzed_plan(frame: DataFrame) -> Any:
    """The JVM's analyzed logical plan of a DataFrame (a py4j object)."""
    return frame._jdf.queryExecution().analyzed()


def jvm(session: SparkSession) -> Any:
    """The py4j view of the session's JVM (its packages by name)."""
    gateway = session._jvm
    assert gateway is not None, "the session has a JVM"
    return gateway


def java_class(session: SparkSession, name: str) -> Any:
    """The JVM class of that full name (py4j's view of it: its constructor and static methods),
    named at once. Looking it up through the JVM's view (``jvm(session).org.apache...``) asks
    the JVM about every part of the name in turn, and for each part that is not a class it
    searches the whole class path: about 0.5 ms of CPU a lookup."""
    return JavaClass(name, jvm(session)._gateway_client)


def session_state(session: SparkSession) -> Any:
    """The JVM session's SessionState: its registries of functions and its SQL parser."""
    return session._jsparkSession.sessionState()


def pickled_rows(frame: DataFrame) -> Any:
    """The JVM's RDD of a DataFrame's rows as the driver's Python reads them (pickled by the
    JVM), a py4j JavaRDD: what DataFrame.rdd wraps."""
    return frame._jdf.javaToPython()


def collect_partitions(frame: DataFrame, rows: Any, partitions: Sequence[int]) -> list[Row]:
    """The rows of some partitions of rows (pickled_rows of frame), collected by one Spark job.
    Unlike SparkContext.runJob, which maps each partition with a Python function first, the job
    runs no Python of its own beyond what computing the rows does."""
    session = frame.sparkSession
    python_rdd = java_class(session, "org.apache.spark.api.python.PythonRDD")
    served = python_rdd.runJob(session.sparkContext._jsc.sc(), rows, list(partitions))
    serializer = BatchedSerializer(CPickleSerializer())  # type: ignore[no-untyped-call]
    with _load_from_socket(served, serializer) as stream:
        return list(stream)


def stop_python_daemons(session: SparkSession) -> int:
    """Stops each of this JVM's factories of Python workers (SparkEnv's private map of them):
    it ends its idle workers, then its daemon, under the lock with which it hands workers out,
    and starts a daemon again for the next Python task. Returns how many factories there were.
    The field is read by name: py4j cannot look SparkEnv's methods up, since one of them names
    a class that PySpark's jars do not have."""
    spark_env = java_class(session, "java.lang.Class").forName("org.apache.spark.SparkEnv")
    field = spark_env.getDeclaredField("pythonWorkers")
    field.setAccessible(True)
    factories = field.get(session.sparkContext._jsc.sc().env()).values().iterator()
    stopped = 0
    while factories.hasNext():
        factories.next().stop()
        stopped += 1
    return stopped


def launch_jvm(conf: SparkConf) -> None:
    """Starts the driver's JVM (pyspark's py4j gateway) with conf on its command line, before
    any session is made: the settings a session is made with later reach the JVM through py4j
    alone, never on a command line that other processes can read."""
    SparkContext._ensure_initialized(conf=conf)
