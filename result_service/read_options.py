"""Projection and filter of a read, checked against the schema of the snapshot read."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.schema import Schema, prune_columns
from pyparsing import ParseException

from service_runtime.errors import FieldViolation, FieldViolations, invalid_argument

MAX_FILTER_LENGTH = 10_000


def parse_filter(text: str) -> BooleanExpression:
    """The filter's expression (syntax only: columns are checked by ReadOptions.of)."""
    if not text.strip():
        return AlwaysTrue()
    if len(text) > MAX_FILTER_LENGTH:
        raise invalid_argument(
            [FieldViolation("filter", f"must be at most {MAX_FILTER_LENGTH} characters")]
        )
    try:
        return parse(text)
    except ParseException as exc:
        raise invalid_argument(
            [
                FieldViolation(
                    "filter", f"is not a valid filter: unexpected input at character {exc.col}"
                )
            ]
        ) from None


@dataclass(frozen=True)
class ReadOptions:
    #: The table's schema at the snapshot read.
    schema: Schema
    #: The requested columns, in request order.
    projected: Schema
    row_filter: BooleanExpression

    @classmethod
    def of(
        cls,
        schema: Schema,
        columns: list[str],
        row_filter: BooleanExpression,
        *,
        filter_field: str = "filter",
    ) -> ReadOptions:
        """INVALID_ARGUMENT naming columns[i] or filter_field for what the schema lacks."""
        violations = FieldViolations()
        fields = []
        by_name = {field.name: field for field in schema.fields}
        for index, name in enumerate(columns):
            if name not in by_name:
                violations.add(f"columns[{index}]", f"the result has no column {name!r}")
            elif name in columns[:index]:
                violations.add(f"columns[{index}]", f"column {name!r} is asked for twice")
            else:
                fields.append(by_name[name])
        try:
            bind(schema, row_filter, case_sensitive=True)
        except (ValueError, TypeError) as exc:
            violations.add(filter_field, f"does not fit the result's columns: {exc}")
        violations.raise_if_any()
        projected = Schema(*fields, schema_id=schema.schema_id) if columns else schema
        return cls(schema=schema, projected=projected, row_filter=row_filter)

    @property
    def filter_columns(self) -> Schema:
        """Just the columns the filter needs (the first column when there is no filter)."""
        if self.row_filter == AlwaysTrue():
            return Schema(self.schema.fields[0], schema_id=self.schema.schema_id)
        ids = extract_field_ids(bind(self.schema, self.row_filter, case_sensitive=True))
        return prune_columns(self.schema, ids, select_full_types=False)
