"""What a Python UDF yields is checked against its output columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cu_service.workflow.udf import conform

OUTPUT = pa.schema([pa.field("id", pa.int64()), pa.field("price", pa.decimal128(10, 2))])


def test_batches_are_cast_safely_to_the_output_types() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"id": pa.array([1, 2], pa.int32()), "price": pa.array([1, 2], pa.int16())}
    )
    conformed = conform(batch, OUTPUT)
    assert conformed.schema.equals(OUTPUT)
    assert conformed.column("id").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    ("yielded", "error", "says"),
    [
        ({"id": [1]}, ValueError, "the output columns are"),
        ({"price": [1.5], "id": [1]}, ValueError, "yielded columns"),
        ({"id": ["x"], "price": [1]}, pa.ArrowInvalid, None),
        ({"id": [1], "price": [10**12]}, pa.ArrowInvalid, None),
    ],
    ids=["missing column", "wrong order", "wrong type", "beyond the precision"],
)
def test_batches_that_do_not_fit_say_why(
    yielded: dict[str, list[object]], error: type[Exception], says: str | None
) -> None:
    with pytest.raises(error, match=says):
        conform(pa.RecordBatch.from_pydict(yielded), OUTPUT)


def test_only_record_batches_may_be_yielded() -> None:
    with pytest.raises(TypeError, match=r"pyarrow\.RecordBatch, not Table"):
        conform(pa.table({"id": [1]}), OUTPUT)
