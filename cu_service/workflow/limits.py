"""Limits on what a workflow may ask for, checked at submission before anything else.

They run before the graph checks, so an oversized workflow costs nothing more
than counting. A workflow over a limit is refused with INVALID_ARGUMENT: the
field is the offending one, the description names the limit and the setting
that sets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service_runtime.errors import FieldViolations
from texera.lake.v1 import workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings

#: Tokens of an expression or SQL text that matter for its depth: quoted text and comments
#: (skipped), brackets, and the words CASE and END.
_TOKEN = re.compile(
    r"""'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|`[^`]*`?|--[^\n]*|/\*.*?(?:\*/|\Z)"""
    r"""|[A-Za-z_][A-Za-z0-9_]*|[()\[\]{}]""",
    re.DOTALL,
)
#: Nodes of a Spark logical plan that set a number of partitions, and the field that does.
_PARTITIONING = {
    "Range": "numSlices",
    "Repartition": "numPartitions",
    "RepartitionByExpression": "optNumPartitions",
    "RebalancePartitions": "optNumPartitions",
}
_OPENING = frozenset({"(", "[", "{", "case"})
_CLOSING = frozenset({")", "]", "}", "end"})


@dataclass(frozen=True)
class Limit:
    value: int
    #: The environment variable that sets it.
    setting: str

    def exceeded_by(self, amount: int) -> bool:
        return amount > self.value

    def describe(self, what: str, amount: int) -> str:
        return f"{what} is {amount}, over the limit of {self.value} (set by {self.setting})"


@dataclass(frozen=True)
class WorkflowLimits:
    operators: Limit
    source_partitions: Limit
    range_rows: Limit
    inline_rows: Limit
    inline_bytes: Limit
    expression_chars: Limit
    expression_depth: Limit

    @classmethod
    def of(cls, settings: ComputingUnitSettings) -> WorkflowLimits:
        def limit(attribute: str) -> Limit:
            return Limit(int(getattr(settings, attribute)), settings.variable_of(attribute))

        return cls(
            operators=limit("max_operators"),
            source_partitions=limit("max_source_partitions"),
            range_rows=limit("max_range_rows"),
            inline_rows=limit("max_inline_rows"),
            inline_bytes=limit("max_inline_bytes"),
            expression_chars=limit("max_expression_chars"),
            expression_depth=limit("max_expression_depth"),
        )


def nesting_depth(text: str) -> int:
    """How deeply brackets and CASE ... END nest in an expression or SQL text."""
    depth = deepest = 0
    for token in _TOKEN.findall(text):
        lowered = token.lower()
        if lowered in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        elif lowered in _CLOSING:
            depth = max(0, depth - 1)
    return deepest


def check_limits(
    workflow: workflow_pb2.Workflow, limits: WorkflowLimits, field: str = "workflow"
) -> None:
    """Raises INVALID_ARGUMENT naming every field over a limit."""
    violations = FieldViolations()
    operators = workflow.operators
    if limits.operators.exceeded_by(len(operators)):
        violations.add(
            f"{field}.operators",
            limits.operators.describe("the number of operators", len(operators)),
        )
        violations.raise_if_any()  # counting is all an oversized workflow gets
    for index, op in enumerate(operators):
        path = f"{field}.operators[{index}]"
        who = f"operator {op.operator_id!r}"
        kind = op.WhichOneof("kind")
        if kind == "range_source":
            _range(violations, f"{path}.range_source", who, op.range_source, limits)
        elif kind == "inline_source":
            _inline(violations, f"{path}.inline_source", who, op.inline_source, limits)
        for where, text in _expressions(op):
            _expression(violations, f"{path}.{kind}.{where}", who, text, limits)
    violations.raise_if_any()


def _range(
    violations: FieldViolations,
    path: str,
    who: str,
    source: workflow_pb2.RangeSource,
    limits: WorkflowLimits,
) -> None:
    if limits.source_partitions.exceeded_by(source.partitions):
        violations.add(
            f"{path}.partitions",
            f"{who}: " + limits.source_partitions.describe("partitions", source.partitions),
        )
    rows = _range_rows(source.start, source.end, source.step or 1)
    if limits.range_rows.exceeded_by(rows):
        violations.add(f"{path}.end", f"{who}: " + limits.range_rows.describe("rows", rows))


def _inline(
    violations: FieldViolations,
    path: str,
    who: str,
    source: workflow_pb2.InlineSource,
    limits: WorkflowLimits,
) -> None:
    if limits.inline_rows.exceeded_by(len(source.rows)):
        violations.add(
            f"{path}.rows", f"{who}: " + limits.inline_rows.describe("rows", len(source.rows))
        )
    size = source.ByteSize()
    if limits.inline_bytes.exceeded_by(size):
        violations.add(f"{path}.rows", f"{who}: " + limits.inline_bytes.describe("bytes", size))


def _expressions(op: workflow_pb2.Operator) -> list[tuple[str, str]]:
    """(field relative to the operator's kind, text) of every expression the operator holds."""
    kind = op.WhichOneof("kind")
    if kind == "filter":
        return [("condition", op.filter.condition)]
    if kind == "projection":
        return [
            (f"columns[{i}].expression", c.expression) for i, c in enumerate(op.projection.columns)
        ]
    if kind == "aggregate":
        return [
            (f"aggregations[{i}].column", a.column) for i, a in enumerate(op.aggregate.aggregations)
        ]
    if kind == "sql_query":
        return [("query", op.sql_query.query)]
    return []


def _expression(
    violations: FieldViolations, path: str, who: str, text: str, limits: WorkflowLimits
) -> None:
    if limits.expression_chars.exceeded_by(len(text)):
        violations.add(path, f"{who}: " + limits.expression_chars.describe("its length", len(text)))
        return
    depth = nesting_depth(text)
    if limits.expression_depth.exceeded_by(depth):
        violations.add(path, f"{who}: " + limits.expression_depth.describe("its nesting", depth))


def _range_rows(start: int, end: int, step: int) -> int:
    """Ceiling division, as len(range(...)) overflows beyond 2^63 rows."""
    return max(0, -((start - end) // step))


def plan_problem(nodes: Iterable[Mapping[str, Any]], limits: WorkflowLimits) -> str | None:
    """What in an analyzed Spark plan (its nodes as Spark's JSON gives them) goes over a limit:
    SQL can ask for ranges and partitions too (``range(0, n, 1, slices)``, a REPARTITION hint)."""
    for node in nodes:
        kind = str(node.get("class", "")).rsplit(".", 1)[-1]
        partitions = node.get(_PARTITIONING.get(kind, ""))
        if isinstance(partitions, int) and limits.source_partitions.exceeded_by(partitions):
            return limits.source_partitions.describe("a number of partitions", partitions)
        if kind == "Range":
            rows = _range_rows(int(node["start"]), int(node["end"]), int(node["step"]) or 1)
            if limits.range_rows.exceeded_by(rows):
                return limits.range_rows.describe("the rows of a range", rows)
    return None
