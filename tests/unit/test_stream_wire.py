"""StreamResult messages encoded by hand on the server and decoded in place by lake_client
agree with the generated protobuf code, field for field."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_client.result_stream import decode, record_batches
from result_service import arrow_ipc
from result_service.streaming import encode_response
from texera.lake.v1 import result_service_pb2

CASES = [
    (b"", 0, 0, ""),
    (b"\x00" * 300, 65_536, 5_359_538_129_046_742_386, "token.tag"),
    (b"ipc", 1, -7, ""),  # a negative int64 travels as ten bytes
    (b"x" * 200_000, 2**40, 1, "é" * 50),
]


@pytest.mark.parametrize(("payload", "rows", "snapshot_id", "resume"), CASES)
def test_the_server_encoding_is_what_protobuf_reads(
    payload: bytes, rows: int, snapshot_id: int, resume: str
) -> None:
    encoded = encode_response(payload, rows, snapshot_id, resume)
    expected = result_service_pb2.StreamResultResponse(
        arrow_ipc=payload, row_count=rows, snapshot_id=snapshot_id, resume_page_token=resume
    )
    assert encoded == expected.SerializeToString()
    assert encode_response(pa.py_buffer(payload), rows, snapshot_id, resume) == encoded


@pytest.mark.parametrize(("payload", "rows", "snapshot_id", "resume"), CASES)
def test_the_client_decoding_reads_what_protobuf_writes(
    payload: bytes, rows: int, snapshot_id: int, resume: str
) -> None:
    message = result_service_pb2.StreamResultResponse(
        arrow_ipc=payload, row_count=rows, snapshot_id=snapshot_id, resume_page_token=resume
    )
    decoded = decode(message.SerializeToString())
    assert bytes(decoded.arrow_ipc) == payload
    assert (decoded.row_count, decoded.snapshot_id, decoded.resume_page_token) == (
        rows,
        snapshot_id,
        resume,
    )


def test_the_client_skips_fields_it_does_not_know() -> None:
    known = result_service_pb2.StreamResultResponse(arrow_ipc=b"abc", row_count=3)
    unknown = b"\x2a\x02hi" + b"\x30\x05" + b"\x39" + b"\x00" * 8 + b"\x45" + b"\x00" * 4
    decoded = decode(unknown + known.SerializeToString())
    assert (bytes(decoded.arrow_ipc), decoded.row_count) == (b"abc", 3)


def test_batches_are_read_into_aligned_memory_of_their_own() -> None:
    rows = pa.record_batch(
        {"id": pa.array(range(1_000), pa.int64()), "label": [f"row-{i}" for i in range(1_000)]}
    )
    received = [
        encode_response(arrow_ipc.schema_message(rows.schema), 0, 1, ""),
        encode_response(rows.serialize(), rows.num_rows, 1, ""),
    ]
    schema, batches = record_batches(decode(message) for message in received)
    [batch] = list(batches)
    assert schema == rows.schema
    assert batch == rows
    spans = [(start, start + len(m)) for m in received for start in [pa.py_buffer(m).address]]
    for column in batch.columns:
        for buffer in filter(None, column.buffers()):
            assert buffer.address % 8 == 0
            assert not any(start <= buffer.address < end for start, end in spans)
