"""The one adapter to PySpark's private API: the JVM side of a session and of a DataFrame (their
py4j objects, for Catalyst's plans and registries) and the DDL type parser; checked against
PYSPARK_VERSION (a unit test fails when the installed version moves, so these are looked at
again)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
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


def session_state(session: SparkSession) -> Any:
    """The JVM session's SessionState: its registries of functions and its SQL parser."""
    return session._jsparkSession.sessionState()
