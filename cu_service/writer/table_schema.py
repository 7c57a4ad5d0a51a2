"""The schema a result table is created with: its DataFrame's Spark schema, in Arrow, with every
field as nullable as the data Spark hands the writer can be.

Spark declares a struct's field non-nullable when it holds a value in every struct that is
there; the struct itself may still be null (`CASE WHEN … THEN NULL ELSE named_struct('b', …)
END`). In Arrow, as Spark writes it, a null struct's fields hold nulls at its slot, so a required
field under a struct that may be null is refused as it is written ("declared non-nullable but
contains nulls"). The table says what the data holds: a field of a struct that may be null is
optional, and so is everything below it, at any depth (the struct may be a top-level column, a
list's element, a map's value or another struct's field). A null list or map has no elements, so
a list's elements and a map's entries keep Spark's nullability, as do top-level columns, which
are null only where Spark says they may be; map keys are never null.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import StructType

from cu_service.spark import arrow_schema


def table_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the table that holds a DataFrame of this Spark schema."""
    arrow = arrow_schema(schema)
    return pa.schema([_field(field, in_null_struct=False) for field in arrow], arrow.metadata)


def _field(field: pa.Field, *, in_null_struct: bool) -> pa.Field:
    """field, nullable if it is or its struct may be null, its type's fields made so too."""
    nullable = field.nullable or in_null_struct
    return field.with_type(_type(field.type, may_be_null=nullable)).with_nullable(nullable)


def _type(kind: pa.DataType, *, may_be_null: bool) -> pa.DataType:
    """kind with its nested fields' nullability as written; may_be_null: whether a value of
    kind may be null (a null struct's fields are null; a null list or map has no entries)."""
    if isinstance(kind, pa.StructType):
        return pa.struct([_field(child, in_null_struct=may_be_null) for child in kind])
    if isinstance(kind, pa.MapType):
        key, item = (_field(f, in_null_struct=False) for f in (kind.key_field, kind.item_field))
        return pa.map_(key, item, keys_sorted=kind.keys_sorted)
    if isinstance(kind, pa.LargeListType):
        return pa.large_list(_field(kind.value_field, in_null_struct=False))
    if isinstance(kind, pa.ListType):
        return pa.list_(_field(kind.value_field, in_null_struct=False))
    return kind
