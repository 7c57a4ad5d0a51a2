"""What users' SQL and expressions may reach, decided on Spark's own plans.

A query or an expression may read only the operator's inputs, rows it spells
out (VALUES), one-row relations and ranges, and may call any of Spark's
functions except those that reach into the JVM, the host or files. It is
checked twice before it runs: on the tree Spark parsed, before anything is
resolved (function and table names as written, for a clear refusal), and on
the plan Spark analyzed against stand-ins of the inputs (every leaf, plan
node and expression class, subqueries and CTEs included). The forbidden
functions are also removed from Spark's function registries, so that no
session of the unit can call them even unchecked.

This module is the one place that reads Spark's Catalyst trees (over py4j).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cu_service import pyspark_private

_JVM = "calls into the JVM"
_FILES = "reveals the paths of files"
_USER = "reveals the host's user"
_PLATFORM = "reveals the unit's catalog or platform"
_SCHEMA_FILES = "may read schema files"
_LOGS = "reads the logs of other code"

#: Functions users may not call, and why.
FORBIDDEN_FUNCTIONS: dict[str, str] = {
    **dict.fromkeys(("reflect", "java_method", "try_reflect"), _JVM),
    **dict.fromkeys(
        ("input_file_name", "input_file_block_start", "input_file_block_length"), _FILES
    ),
    **dict.fromkeys(("current_user", "user", "session_user"), _USER),
    **dict.fromkeys(
        ("current_catalog", "current_database", "current_schema", "current_path", "version"),
        _PLATFORM,
    ),
    **dict.fromkeys(
        ("from_avro", "to_avro", "schema_of_avro", "from_protobuf", "to_protobuf"), _SCHEMA_FILES
    ),
    "python_worker_logs": _LOGS,
}
#: Catalyst classes of what the forbidden functions become, and the plan node that runs programs.
_FORBIDDEN_CLASSES: dict[str, str] = {
    **dict.fromkeys(("CallMethodViaReflection", "TryReflect"), _JVM),
    **dict.fromkeys(("InputFileName", "InputFileBlockStart", "InputFileBlockLength"), _FILES),
    "CurrentUser": _USER,
    **dict.fromkeys(
        ("CurrentCatalog", "CurrentDatabase", "CurrentPath", "SparkVersion"), _PLATFORM
    ),
    **dict.fromkeys(
        ("FromAvro", "ToAvro", "SchemaOfAvro", "FromProtobuf", "ToProtobuf"), _SCHEMA_FILES
    ),
    "PythonWorkerLogs": _LOGS,
    "ScriptTransformation": "runs a program on the host",
}
#: The only relations a plan may read: the inputs' stand-ins, VALUES, one row, ranges and CTEs.
_ALLOWED_LEAVES = frozenset(
    {"LocalRelation", "OneRowRelation", "Range", "CTERelationRef", "UnionLoopRef"}
)
#: Beyond this many plan nodes, a query is refused rather than checked slowly.
MAX_PLAN_NODES = 1000


class Unreachable(Exception):
    """The query or expression reaches past the operator's inputs; the message says how."""


def stand_in(session: SparkSession, schema: StructType) -> DataFrame:
    """An empty relation with an input's schema, which the checks read instead of the input."""
    return session.range(0).select(
        *(F.lit(None).cast(field.dataType).alias(field.name) for field in schema.fields)
    )


class Reach:
    """The checks, on one Spark session."""

    def __init__(self, session: SparkSession) -> None:
        self._jvm = pyspark_private.jvm(session)
        self._session = session
        self._parser = pyspark_private.session_state(session).sqlParser()
        self._create_array = pyspark_private.java_class(
            session, "org.apache.spark.sql.catalyst.expressions.CreateArray"
        )

    def seal_functions(self) -> None:
        """Removes the forbidden functions from Spark's built-in registries (which every
        later session copies) and from this session's own."""
        analysis = self._jvm.org.apache.spark.sql.catalyst.analysis
        state = pyspark_private.session_state(self._session)
        registries = (
            analysis.FunctionRegistry.builtin(),
            analysis.TableFunctionRegistry.builtin(),
            state.functionRegistry(),
            state.tableFunctionRegistry(),
        )
        option = self._jvm.scala.Option.apply
        for name in FORBIDDEN_FUNCTIONS:
            identifier = self._jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(
                name, option("builtin"), option("system")
            )
            for registry in registries:
                registry.dropFunction(identifier)

    def parse_query(self, query: str) -> None:
        """Refuses text that is not one query (a statement, DDL, a command) and forbidden
        names; raises Spark's ParseException for text that does not parse."""
        with _fail_closed():
            _check_parsed(json.loads(self._parser.parseQuery(query).toJSON()))

    def parse_expression(self, text: str) -> None:
        """Refuses forbidden names in an expression; raises Spark's ParseException for text
        that does not parse."""
        with _fail_closed():
            _check_parsed(json.loads(self._parser.parseExpression(text).toJSON()))

    def check_analyzed(self, frame: DataFrame) -> None:
        """Refuses a plan that reads anything but stand-ins, VALUES, one row or ranges, or
        that holds a forbidden function or plan node."""
        with _fail_closed():
            self._check_plan(pyspark_private.analyzed_plan(frame))

    def _check_plan(self, plan: Any) -> None:
        for name, node in self._nodes(plan):
            _check_class(name)
            if node.children().isEmpty() and name not in _ALLOWED_LEAVES:
                raise Unreachable(
                    f"it reads {_readable(name)}: only the operator's inputs, VALUES and "
                    "ranges may be read"
                )
            for found in _json_nodes(self._expressions_json(node)):
                _check_class(_simple(found["class"]))

    def _nodes(self, plan: Any) -> Iterator[tuple[str, Any]]:
        """Every plan node, those of subqueries included, with its class's simple name."""
        pending = [plan]
        seen = 0
        while pending:
            node = pending.pop()
            seen += 1
            if seen > MAX_PLAN_NODES:
                raise Unreachable(f"it is too large to check (over {MAX_PLAN_NODES} plan nodes)")
            yield _simple(node.getClass().getName()), node
            pending += _items(node.children()) + _items(node.subqueries())

    def _expressions_json(self, node: Any) -> Any:
        """Every expression of a plan node as Catalyst's JSON, in one call: the expressions
        become the children of one array expression (nested lists of expressions included)."""
        return json.loads(self._create_array(node.expressions(), False).toJSON())


@contextlib.contextmanager
def _fail_closed() -> Iterator[None]:
    """What cannot be checked (Spark failing, or a tree too deep to walk) is refused; Spark's
    own complaints about the text (parse and analysis errors) pass through."""
    try:
        yield
    except (Py4JError, RecursionError) as exc:
        raise Unreachable(
            "it could not be checked (too deep or too large), so it is refused"
        ) from exc


def _check_parsed(tree: Any) -> None:
    """Forbidden function names, and relations named with a catalog, database or format."""
    for found in _json_nodes(tree):
        name = _simple(found["class"])
        if name == "UnresolvedRelation":
            parts = _names(found.get("multipartIdentifier"))
            if len(parts) > 1:
                raise Unreachable(
                    f"it reads {'.'.join(parts)}: only the operator's inputs may be named"
                )
        elif name in {"UnresolvedFunction", "UnresolvedTableValuedFunction", "UnresolvedGenerator"}:
            parts = _names(found.get("nameParts") or found.get("name"))
            if parts and (why := FORBIDDEN_FUNCTIONS.get(parts[-1].lower())) is not None:
                raise Unreachable(f"function {parts[-1].lower()} is not available: it {why}")


def _check_class(name: str) -> None:
    if (why := _FORBIDDEN_CLASSES.get(name)) is not None:
        raise Unreachable(f"{_readable(name)} is not available: it {why}")


def _names(value: Any) -> list[str]:
    """A multipart name as Catalyst's JSON writes it: ``"[a, b]"`` (or a list, or a string)."""
    if isinstance(value, list):
        return [str(part) for part in value]
    if isinstance(value, dict):  # a FunctionIdentifier
        return [str(value.get("funcName", ""))]
    text = str(value or "")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip() for part in text.split(", ")] if text else []


def _json_nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every object carrying a class in Catalyst's JSON, however deeply nested."""
    if isinstance(value, dict):
        if isinstance(value.get("class"), str):
            yield value
        for item in value.values():
            yield from _json_nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_nodes(item)


def _simple(class_name: str) -> str:
    return class_name.rsplit(".", 1)[-1].rstrip("$")


def _readable(class_name: str) -> str:
    return {
        "LogicalRelation": "files or a table",
        "ScriptTransformation": "TRANSFORM",
        "CallMethodViaReflection": "reflect",
        "TryReflect": "try_reflect",
    }.get(class_name, class_name)


def _items(sequence: Any) -> list[Any]:
    return [sequence.apply(index) for index in range(sequence.size())]
