"""An Arrow IPC stream cut into messages: the schema, one record batch each, the end marker.

Each piece is one encapsulated IPC message, so their concatenation in order is
one valid Arrow IPC stream (pyarrow.ipc.open_stream, or any Arrow library).
Results have no dictionary-encoded columns, so no dictionary messages are
needed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

#: The end-of-stream marker: a continuation token and a zero message length.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def schema_message(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()  # type: ignore[no-any-return]


def split(rows: pa.RecordBatch, max_rows: int, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """rows cut into slices of at most max_rows rows and, by their average row size, about
    max_bytes bytes (a single row larger than that still goes alone)."""
    if rows.num_rows == 0:
        return
    average = max(1, rows.nbytes // rows.num_rows)
    step = max(1, min(max_rows, max_bytes // average))
    for offset in range(0, rows.num_rows, step):
        yield rows.slice(offset, step)
