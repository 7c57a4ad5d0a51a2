"""Compiling a validated workflow to Spark DataFrames, one per operator.

Spark analyzes each DataFrame as it is built, so unknown columns, type
errors and bad SQL surface here, before anything runs, as INVALID_ARGUMENT
naming the operator and its field. Users' SQL and expressions are first
analyzed over stand-ins of their inputs and refused if they reach past them
(see reach); file sources read only the real files their path names under
the allowed roots (see file_roots). Each execution compiles in its own Spark
session, and the temporary views a SQL operator reads exist only while it is
compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import json_format
from pyspark.accumulators import Accumulator
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, NullType, StructField, StructType

from cu_service import pyspark_private
from cu_service.spark import arrow_schema
from cu_service.workflow import graph
from cu_service.workflow.file_roots import FileRoots, OutsideRoots, ResolvedFiles
from cu_service.workflow.reach import Reach, Unreachable, stand_in
from cu_service.workflow.udf import ConsoleEntry, run_udf
from cu_service.workflow.values import BadValue, convert
from service_runtime.errors import FieldViolation, invalid_argument
from texera.lake.v1 import workflow_pb2

#: Reads an Iceberg table source of the operator at the given index.
IcebergReader = Callable[[int, workflow_pb2.Operator], DataFrame]

_AGGREGATES: dict[int, Callable[[Column], Column]] = {
    workflow_pb2.AGGREGATE_FUNCTION_SUM: F.sum,
    workflow_pb2.AGGREGATE_FUNCTION_AVG: F.avg,
    workflow_pb2.AGGREGATE_FUNCTION_MIN: F.min,
    workflow_pb2.AGGREGATE_FUNCTION_MAX: F.max,
    workflow_pb2.AGGREGATE_FUNCTION_COUNT_DISTINCT: F.count_distinct,
}
_JOINS = {
    workflow_pb2.JOIN_TYPE_INNER: "inner",
    workflow_pb2.JOIN_TYPE_LEFT_OUTER: "left",
    workflow_pb2.JOIN_TYPE_RIGHT_OUTER: "right",
    workflow_pb2.JOIN_TYPE_FULL_OUTER: "full",
    workflow_pb2.JOIN_TYPE_LEFT_SEMI: "left_semi",
    workflow_pb2.JOIN_TYPE_LEFT_ANTI: "left_anti",
}
_FORMATS = {
    workflow_pb2.FILE_FORMAT_PARQUET: "parquet",
    workflow_pb2.FILE_FORMAT_CSV: "csv",
    workflow_pb2.FILE_FORMAT_JSON: "json",
}


class OperatorProblem(Exception):
    """What is wrong with one operator; field is relative to the operator."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass
class SourceFacts:
    """What is known of a source's input before it runs."""

    rows: int = 0
    bytes: int = 0


@dataclass
class CompiledWorkflow:
    frames: dict[str, DataFrame]
    #: Operator ids, inputs before the operators that read them.
    order: list[str]
    #: Ids of the materialized operators, in order.
    materialized: list[str]
    inputs: dict[str, list[str]] = field(default_factory=dict)
    source_facts: dict[str, SourceFacts] = field(default_factory=dict)
    #: The real files each file source reads, to be checked again just before they are read.
    files: dict[str, ResolvedFiles] = field(default_factory=dict)


def column(name: str) -> Column:
    """A column by its exact name (dots and spaces are part of the name)."""
    return F.col("`" + name.replace("`", "``") + "`")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def spark_type(text: str) -> DataType:
    try:
        return pyspark_private.parse_type(text)
    except PySparkException as exc:
        raise OperatorProblem(f"unknown type {text!r}: {first_line(exc)}") from exc


def schema_of(columns: list[workflow_pb2.ColumnSpec], field_name: str) -> StructType:
    fields = []
    for index, spec in enumerate(columns):
        try:
            fields.append(
                StructField(spec.name, spark_type(spec.data_type), nullable=not spec.not_null)
            )
        except OperatorProblem as exc:
            raise OperatorProblem(str(exc), f"{field_name}[{index}].data_type") from exc
    return StructType(fields)


class WorkflowCompiler:
    def __init__(
        self,
        session: SparkSession,
        console: Accumulator[list[ConsoleEntry]],
        read_iceberg: IcebergReader,
        file_roots: FileRoots,
    ) -> None:
        self._session = session
        self._console = console
        self._read_iceberg = read_iceberg
        self._file_roots = file_roots
        self._reach = Reach(session)

    def compile(self, workflow: workflow_pb2.Workflow) -> CompiledWorkflow:
        order = graph.validate(workflow)
        operators = {op.operator_id: (index, op) for index, op in enumerate(workflow.operators)}
        compiled = CompiledWorkflow(frames={}, order=order, materialized=[])
        for operator_id in order:
            index, op = operators[operator_id]
            inputs = [compiled.frames[i] for i in op.input_operator_ids]
            compiled.inputs[operator_id] = list(op.input_operator_ids)
            try:
                frame = self._build(index, op, inputs, compiled)
                if op.materialize:
                    _check_writable(frame)
                    compiled.materialized.append(operator_id)
            except OperatorProblem as exc:
                path = f"workflow.operators[{index}]" + (
                    f".{op.WhichOneof('kind')}.{exc.field}" if exc.field else ""
                )
                raise invalid_argument(
                    [FieldViolation(path, f"operator {operator_id!r}: {exc}")]
                ) from exc
            except PySparkException as exc:
                raise invalid_argument(
                    [
                        FieldViolation(
                            f"workflow.operators[{index}]",
                            f"operator {operator_id!r}: {first_line(exc)}",
                        )
                    ]
                ) from exc
            compiled.frames[operator_id] = frame
        return compiled

    def _build(
        self,
        index: int,
        op: workflow_pb2.Operator,
        inputs: list[DataFrame],
        compiled: CompiledWorkflow,
    ) -> DataFrame:
        kind = op.WhichOneof("kind")
        if kind == "inline_source":
            frame = self._inline(op.inline_source)
            compiled.source_facts[op.operator_id] = SourceFacts(rows=len(op.inline_source.rows))
            return frame
        if kind == "range_source":
            source = op.range_source
            step = source.step or 1
            compiled.source_facts[op.operator_id] = SourceFacts(
                rows=len(range(source.start, source.end, step))
            )
            frame = self._session.range(source.start, source.end, step, source.partitions or None)
            return frame.withColumnRenamed("id", source.column_name or "id")
        if kind == "file_source":
            try:
                files = self._file_roots.resolve(op.file_source.path)
            except OutsideRoots as exc:
                raise OperatorProblem(f"path {op.file_source.path!r}: {exc}", "path") from exc
            compiled.files[op.operator_id] = files
            return self._files(op.file_source, files)
        if kind == "iceberg_table_source":
            return self._read_iceberg(index, op)
        builder: Callable[[workflow_pb2.Operator, list[DataFrame]], DataFrame] = getattr(
            self, f"_{kind}"
        )
        return builder(op, inputs)

    def _inline(self, source: workflow_pb2.InlineSource) -> DataFrame:
        schema = schema_of(list(source.columns), "columns")
        rows = []
        for row_index, row in enumerate(source.rows):
            values = json_format.MessageToDict(row)
            converted = []
            for value, spec_field in zip(values, schema.fields, strict=True):
                try:
                    converted.append(convert(value, spec_field.dataType))
                except BadValue as exc:
                    raise OperatorProblem(
                        f"row {row_index}, column {spec_field.name!r}: {exc}", f"rows[{row_index}]"
                    ) from exc
            rows.append(tuple(converted))
        return self._session.createDataFrame(rows, schema, verifySchema=True)

    def _files(self, source: workflow_pb2.FileSource, files: ResolvedFiles) -> DataFrame:
        reader = self._session.read.format(_FORMATS[source.format])
        if source.columns:
            reader = reader.schema(schema_of(list(source.columns), "columns"))
        if source.format == workflow_pb2.FILE_FORMAT_CSV:
            reader = reader.option("header", source.csv_header).option(
                "sep", source.csv_delimiter or ","
            )
        return reader.load(list(files.paths))

    def _checked(self, field_name: str, check: Callable[[], object], spark_says: str = "") -> None:
        """Runs a check of a user's text; what it finds wrong is a problem of that field
        (Spark's own complaints prefixed by spark_says)."""
        try:
            check()
        except Unreachable as exc:
            raise OperatorProblem(str(exc), field_name) from exc
        except PySparkException as exc:
            raise OperatorProblem(spark_says + first_line(exc), field_name) from exc

    def _check_expression(
        self, text: str, field_name: str, apply: Callable[[DataFrame], DataFrame], input: DataFrame
    ) -> None:
        """Parses the expression, then analyzes it over a stand-in of the input."""
        self._checked(field_name, lambda: self._reach.parse_expression(text))
        self._checked(
            field_name,
            lambda: self._reach.check_analyzed(apply(stand_in(self._session, input.schema))),
        )

    def _filter(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        condition = op.filter.condition
        self._check_expression(
            condition, "condition", lambda frame: frame.filter(F.expr(condition)), inputs[0]
        )
        return inputs[0].filter(F.expr(condition))

    def _projection(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        for index, projected in enumerate(op.projection.columns):
            self._check_expression(
                projected.expression,
                f"columns[{index}].expression",
                functools.partial(_select, projected.expression),
                inputs[0],
            )
        columns = [
            F.expr(c.expression).alias(c.alias) if c.alias else F.expr(c.expression)
            for c in op.projection.columns
        ]
        return inputs[0].select(*columns)

    def _aggregate(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        aggregations = []
        for aggregation in op.aggregate.aggregations:
            if aggregation.function == workflow_pb2.AGGREGATE_FUNCTION_COUNT:
                counted = F.count(column(aggregation.column) if aggregation.column else F.lit(1))
            else:
                counted = _AGGREGATES[aggregation.function](column(aggregation.column))
            aggregations.append(counted.alias(aggregation.alias))
        return inputs[0].groupBy(*(column(c) for c in op.aggregate.group_by)).agg(*aggregations)

    def _join(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        left, right = inputs
        if op.join.type == workflow_pb2.JOIN_TYPE_CROSS:
            return left.crossJoin(right)
        how = _JOINS[op.join.type]
        if all(k.left_column == k.right_column for k in op.join.keys):
            return left.join(right, on=[k.left_column for k in op.join.keys], how=how)
        left_side, right_side = left.alias("__left"), right.alias("__right")
        condition = functools.reduce(
            lambda a, b: a & b,
            [
                F.col(f"__left.`{k.left_column}`") == F.col(f"__right.`{k.right_column}`")
                for k in op.join.keys
            ],
        )
        return left_side.join(right_side, on=condition, how=how)

    def _sort(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        keys = []
        for key in op.sort.keys:
            nulls_first = {
                workflow_pb2.NULL_ORDERING_NULLS_FIRST: True,
                workflow_pb2.NULL_ORDERING_NULLS_LAST: False,
            }.get(key.null_ordering, not key.descending)
            base = column(key.column)
            if key.descending:
                keys.append(base.desc_nulls_first() if nulls_first else base.desc_nulls_last())
            else:
                keys.append(base.asc_nulls_first() if nulls_first else base.asc_nulls_last())
        return inputs[0].orderBy(*keys)

    def _limit(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        frame = inputs[0].offset(op.limit.offset) if op.limit.offset else inputs[0]
        return frame.limit(op.limit.count)

    def _distinct(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        columns = list(op.distinct.columns)
        return inputs[0].dropDuplicates(columns) if columns else inputs[0].distinct()

    def _union(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        merge: Callable[[DataFrame, DataFrame], DataFrame] = (
            (lambda a, b: a.unionByName(b)) if op.union.by_name else (lambda a, b: a.union(b))
        )
        return functools.reduce(merge, inputs)

    def _sql_query(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        query = op.sql_query.query.strip().rstrip(";")
        # Only one query parses here: statements (DDL, INSERT, SET, CACHE ...) never run.
        self._checked(
            "query",
            lambda: self._reach.parse_query(query),
            "must be one query (SELECT, WITH, VALUES or TABLE): ",
        )
        names = list(dict.fromkeys(op.input_operator_ids))
        frames = dict(zip(op.input_operator_ids, inputs, strict=True))
        try:
            for name in names:
                stand_in(self._session, frames[name].schema).createOrReplaceTempView(f"`{name}`")
            self._checked("query", lambda: self._reach.check_analyzed(self._session.sql(query)))
            for name in names:
                frames[name].createOrReplaceTempView(f"`{name}`")
            return self._session.sql(query)
        finally:  # later operators must not see these inputs
            for name in names:
                self._session.catalog.dropTempView(name)

    def _python_udf(self, op: workflow_pb2.Operator, inputs: list[DataFrame]) -> DataFrame:
        udf = op.python_udf
        schema = schema_of(list(udf.output_columns), "output_columns")
        function = run_udf(
            op.operator_id,
            udf.code,
            udf.function_name or "process",
            arrow_schema(schema),
            self._console,
        )
        return inputs[0].mapInArrow(function, schema)


def _select(expression: str, frame: DataFrame) -> DataFrame:
    return frame.select(F.expr(expression))


def _check_writable(frame: DataFrame) -> None:
    """An Iceberg table needs unique column names and types it can hold."""
    seen: set[str] = set()
    for spec in frame.schema.fields:
        if spec.name.lower() in seen:
            raise OperatorProblem(
                f"its output has two columns named {spec.name!r}; rename one with a projection before materializing"
            )
        seen.add(spec.name.lower())
        if isinstance(spec.dataType, NullType):
            raise OperatorProblem(
                f"column {spec.name!r} has no type (NULL); cast it before materializing"
            )
    if not frame.schema.fields:
        raise OperatorProblem("its output has no columns")
