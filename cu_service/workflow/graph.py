"""Static checks of a workflow before Spark sees it: ids, inputs, arity, cycles, required fields.

Sizes (operators, rows, partitions, expression lengths) are the unit's settings, checked
first by cu_service.workflow.limits.

Every problem becomes a field violation whose path names the operator's place
in the request (``workflow.operators[3].filter.condition``) and whose
description names the operator id.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable

from google.protobuf import struct_pb2

from service_runtime.errors import FieldViolations
from service_runtime.identifiers import IDENTIFIER
from texera.lake.v1 import workflow_pb2

MAX_TEXT = 100_000
SOURCES = frozenset({"inline_source", "range_source", "file_source", "iceberg_table_source"})
#: How many inputs each kind takes: an exact count, or (minimum, None) for "at least".
_ARITY: dict[str, int | tuple[int, None]] = {
    **dict.fromkeys(SOURCES, 0),
    "join": 2,
    "union": (1, None),
    "sql_query": (1, None),
}

Check = Callable[[FieldViolations, str, str, workflow_pb2.Operator], None]
#: Inline values of no kind named one by one; past that, only counted.
_NAMED_EMPTY_VALUES = 10


def _arity_problem(kind: str, count: int) -> str | None:
    expected = _ARITY.get(kind, 1)
    if isinstance(expected, tuple):
        return (
            None if count >= expected[0] else f"takes at least {expected[0]} input(s), has {count}"
        )
    return None if count == expected else f"takes {expected} input(s), has {count}"


def _columns(
    violations: FieldViolations, path: str, who: str, columns: list[workflow_pb2.ColumnSpec]
) -> None:
    seen: set[str] = set()
    for index, column in enumerate(columns):
        where = f"{path}[{index}]"
        if not 1 <= len(column.name) <= 128:
            violations.add(f"{where}.name", f"{who}: a column name must be 1 to 128 characters")
        elif column.name in seen:
            violations.add(f"{where}.name", f"{who}: column {column.name!r} appears twice")
        seen.add(column.name)
        violations.check(
            bool(column.data_type.strip()), f"{where}.data_type", f"{who}: a column needs a type"
        )


def _first_empty(values: Iterable[tuple[struct_pb2.Value, str]]) -> str | None:
    """The path of the first value (or value within it) that has no kind set.

    A value of no kind is never what a client meant (a null is ``null_value``), but it is what
    one sends when its protobuf library drops a field name it does not know: protobufjs with
    ``keepCase: true`` drops ``number_value``, and the rows would be written as nulls."""
    for value, path in values:
        kind = value.WhichOneof("kind")
        if kind is None:
            return path
        if kind == "list_value":
            items = value.list_value.values
            inner = ((v, f"{path}.list_value.values[{i}]") for i, v in enumerate(items))
        elif kind == "struct_value":
            fields = value.struct_value.fields
            inner = ((v, f"{path}.struct_value.fields[{k!r}]") for k, v in fields.items())
        else:
            continue
        if found := _first_empty(inner):
            return found
    return None


def _inline(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    source = op.inline_source
    violations.check(bool(source.columns), f"{path}.columns", f"{who}: needs at least one column")
    _columns(violations, f"{path}.columns", who, list(source.columns))
    empty: list[str] = []
    for index, row in enumerate(source.rows):
        if len(row.values) != len(source.columns):
            violations.add(
                f"{path}.rows[{index}]",
                f"{who}: row {index} has {len(row.values)} values for {len(source.columns)} columns",
            )
        where = f"{path}.rows[{index}].values"
        if found := _first_empty((v, f"{where}[{i}]") for i, v in enumerate(row.values)):
            empty.append(found)
    for found in empty[:_NAMED_EMPTY_VALUES]:
        violations.add(found, f"{who}: a value with no kind set; a null is null_value")
    if len(empty) > _NAMED_EMPTY_VALUES:
        violations.add(
            f"{path}.rows",
            f"{who}: {len(empty) - _NAMED_EMPTY_VALUES} more rows hold values with no kind set",
        )


def _range(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    source = op.range_source
    violations.check(source.partitions >= 0, f"{path}.partitions", f"{who}: must not be negative")
    if source.column_name:
        violations.check(
            len(source.column_name) <= 128, f"{path}.column_name", f"{who}: at most 128 characters"
        )


def _file(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    source = op.file_source
    violations.check(
        source.format != workflow_pb2.FILE_FORMAT_UNSPECIFIED,
        f"{path}.format",
        f"{who}: a file format is required",
    )
    violations.check(
        os.path.isabs(source.path), f"{path}.path", f"{who}: the path must be absolute"
    )
    _columns(violations, f"{path}.columns", who, list(source.columns))
    violations.check(
        len(source.csv_delimiter) <= 1, f"{path}.csv_delimiter", f"{who}: one character"
    )


def _iceberg(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    source = op.iceberg_table_source
    which = source.WhichOneof("table")
    if which is None:
        violations.add(f"{path}.table", f"{who}: name a result or a table")
    elif which == "result":
        violations.check(
            bool(source.result.execution_id), f"{path}.result.execution_id", f"{who}: required"
        )
        violations.check(
            bool(source.result.operator_id), f"{path}.result.operator_id", f"{who}: required"
        )
    else:
        table = source.table_identifier
        violations.check(
            bool(table.namespace), f"{path}.table_identifier.namespace", f"{who}: required"
        )
        violations.check(bool(table.name), f"{path}.table_identifier.name", f"{who}: required")


def _text(violations: FieldViolations, field: str, who: str, text: str, what: str) -> None:
    if not text.strip():
        violations.add(field, f"{who}: {what} is required")
    elif len(text) > MAX_TEXT:
        violations.add(field, f"{who}: {what} must be at most {MAX_TEXT} characters")


def _filter(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    _text(violations, f"{path}.condition", who, op.filter.condition, "a condition")


def _projection(
    violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator
) -> None:
    columns = op.projection.columns
    violations.check(bool(columns), f"{path}.columns", f"{who}: needs at least one column")
    for index, column in enumerate(columns):
        _text(
            violations,
            f"{path}.columns[{index}].expression",
            who,
            column.expression,
            "an expression",
        )


def _aggregate(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    aggregations = op.aggregate.aggregations
    violations.check(
        bool(aggregations), f"{path}.aggregations", f"{who}: needs at least one aggregation"
    )
    aliases: set[str] = set()
    for index, aggregation in enumerate(aggregations):
        where = f"{path}.aggregations[{index}]"
        if aggregation.function == workflow_pb2.AGGREGATE_FUNCTION_UNSPECIFIED:
            violations.add(f"{where}.function", f"{who}: a function is required")
        if not aggregation.column and aggregation.function != workflow_pb2.AGGREGATE_FUNCTION_COUNT:
            violations.add(f"{where}.column", f"{who}: a column is required")
        if not aggregation.alias or aggregation.alias in aliases:
            violations.add(f"{where}.alias", f"{who}: needs an alias unique among the aggregations")
        aliases.add(aggregation.alias)


def _join(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    join = op.join
    violations.check(
        join.type != workflow_pb2.JOIN_TYPE_UNSPECIFIED,
        f"{path}.type",
        f"{who}: a join type is required",
    )
    if join.type == workflow_pb2.JOIN_TYPE_CROSS:
        violations.check(not join.keys, f"{path}.keys", f"{who}: a cross join takes no keys")
    else:
        violations.check(bool(join.keys), f"{path}.keys", f"{who}: needs at least one key")
    for index, key in enumerate(join.keys):
        violations.check(
            bool(key.left_column), f"{path}.keys[{index}].left_column", f"{who}: required"
        )
        violations.check(
            bool(key.right_column), f"{path}.keys[{index}].right_column", f"{who}: required"
        )


def _sort(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    violations.check(bool(op.sort.keys), f"{path}.keys", f"{who}: needs at least one key")
    for index, key in enumerate(op.sort.keys):
        violations.check(bool(key.column), f"{path}.keys[{index}].column", f"{who}: required")


def _limit(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    violations.check(op.limit.count >= 0, f"{path}.count", f"{who}: must not be negative")
    violations.check(op.limit.offset >= 0, f"{path}.offset", f"{who}: must not be negative")


def _sql(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    _text(violations, f"{path}.query", who, op.sql_query.query, "a query")


def _python(violations: FieldViolations, path: str, who: str, op: workflow_pb2.Operator) -> None:
    udf = op.python_udf
    _text(violations, f"{path}.code", who, udf.code, "code")
    violations.check(
        bool(udf.output_columns), f"{path}.output_columns", f"{who}: needs at least one column"
    )
    _columns(violations, f"{path}.output_columns", who, list(udf.output_columns))
    if not udf.code.strip() or len(udf.code) > MAX_TEXT:
        return
    try:
        module = ast.parse(udf.code, filename=f"<udf {op.operator_id}>")
    except SyntaxError as exc:
        violations.add(f"{path}.code", f"{who}: syntax error at line {exc.lineno}: {exc.msg}")
        return
    name = udf.function_name or "process"
    defined = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    violations.check(
        name in defined, f"{path}.function_name", f"{who}: the code defines no function {name!r}"
    )


def _nothing_to_check(*_: object) -> None:
    """For operators whose settings are valid whatever they hold (distinct, union)."""


_CHECKS: dict[str, Check] = {
    "inline_source": _inline,
    "range_source": _range,
    "file_source": _file,
    "iceberg_table_source": _iceberg,
    "filter": _filter,
    "projection": _projection,
    "aggregate": _aggregate,
    "join": _join,
    "sort": _sort,
    "limit": _limit,
    "distinct": _nothing_to_check,
    "union": _nothing_to_check,
    "sql_query": _sql,
    "python_udf": _python,
}


def validate(workflow: workflow_pb2.Workflow, field: str = "workflow") -> list[str]:
    """Checks the workflow; returns its operator ids in an order where inputs come first.

    Raises INVALID_ARGUMENT naming every bad field."""
    violations = FieldViolations()
    operators = list(workflow.operators)
    violations.check(
        len(workflow.workflow_id) <= 128, f"{field}.workflow_id", "must be at most 128 characters"
    )
    if not operators:
        violations.add(f"{field}.operators", "a workflow needs at least one operator")
    index_of: dict[str, int] = {}
    for index, op in enumerate(operators):
        path = f"{field}.operators[{index}]"
        if not IDENTIFIER.match(op.operator_id):
            violations.add(f"{path}.operator_id", "must be 1 to 64 letters, digits, '_' or '-'")
        elif op.operator_id in index_of:
            violations.add(f"{path}.operator_id", f"operator id {op.operator_id!r} is used twice")
        else:
            index_of[op.operator_id] = index
    for index, op in enumerate(operators):
        path = f"{field}.operators[{index}]"
        who = f"operator {op.operator_id!r}"
        kind = op.WhichOneof("kind")
        if kind is None:
            violations.add(f"{path}.kind", f"{who}: says nothing about what it does")
            continue
        if problem := _arity_problem(kind, len(op.input_operator_ids)):
            violations.add(f"{path}.input_operator_ids", f"{who} ({kind}) {problem}")
        for position, input_id in enumerate(op.input_operator_ids):
            if input_id not in index_of:
                violations.add(
                    f"{path}.input_operator_ids[{position}]", f"{who}: no operator {input_id!r}"
                )
            elif input_id == op.operator_id:
                violations.add(
                    f"{path}.input_operator_ids[{position}]", f"{who}: reads its own output"
                )
        _CHECKS[kind](violations, f"{path}.{kind}", who, op)
    if operators and not any(op.materialize for op in operators):
        violations.add(
            f"{field}.operators", "no operator is materialized: nothing would be written"
        )
    violations.raise_if_any()
    return _topological_order(operators, index_of, field)


def _topological_order(
    operators: list[workflow_pb2.Operator], index_of: dict[str, int], field: str
) -> list[str]:
    """Kahn's algorithm; operators left over sit on a cycle."""
    pending = {op.operator_id: set(op.input_operator_ids) for op in operators}
    order: list[str] = []
    ready = [op.operator_id for op in operators if not pending[op.operator_id]]
    while ready:
        current = ready.pop(0)
        order.append(current)
        for op in operators:
            waiting = pending[op.operator_id]
            if current in waiting:
                waiting.discard(current)
                if not waiting:
                    ready.append(op.operator_id)
    if len(order) < len(operators):
        violations = FieldViolations()
        for operator_id in sorted(set(pending) - set(order), key=index_of.__getitem__):
            violations.add(
                f"{field}.operators[{index_of[operator_id]}].input_operator_ids",
                f"operator {operator_id!r} is part of a cycle",
            )
        violations.raise_if_any()
    return order
