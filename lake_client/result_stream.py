"""StreamResult into Arrow record batches, for Python callers, with one copy of the data.

The generated stub decodes each message into an object and copies the Arrow
payload out of it; for a large result those copies cost more than the read.
Here each message stays the bytes gRPC received, the Arrow IPC payload is
found in place (field `arrow_ipc` of StreamResultResponse) and copied once
into a buffer of Arrow's memory pool, which the record batch is read from.

That one copy is deliberate. Read in place, the batch's buffers would sit at
whatever offset the payload has inside the message, not on the 8-byte
boundaries Arrow's format asks for, and would keep gRPC's message memory
alive until the whole result is dropped; the allocator then has to fault in
fresh pages for every message of every read, which costs more than the copy.

    with grpc.insecure_channel(target) as channel:
        table = ResultStream(channel).read_all(request, metadata=metadata)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pyarrow as pa

from texera.lake.v1 import result_service_pb2

METHOD = "/texera.lake.v1.ResultService/StreamResult"
_FIELDS = result_service_pb2.StreamResultResponse.DESCRIPTOR.fields_by_name
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class StreamMessage:
    """One StreamResultResponse, its payload a view into the received bytes."""

    arrow_ipc: memoryview
    row_count: int = 0
    snapshot_id: int = 0
    resume_page_token: str = ""


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode(message: bytes) -> StreamMessage:
    """A StreamResultResponse in wire format; fields it does not know are skipped."""
    data = memoryview(message)
    fields: dict[int, Any] = {}
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            fields[number], position = _varint(data, position)
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(data, position)
            fields[number], position = data[position : position + length], position + length
        elif wire_type in (_FIXED64, _FIXED32):
            position += 8 if wire_type == _FIXED64 else 4
        else:
            raise ValueError(f"unexpected wire type {wire_type} in a StreamResultResponse")
    return StreamMessage(
        arrow_ipc=fields.get(_FIELDS["arrow_ipc"].number, memoryview(b"")),
        row_count=_signed(fields.get(_FIELDS["row_count"].number, 0)),
        snapshot_id=_signed(fields.get(_FIELDS["snapshot_id"].number, 0)),
        resume_page_token=bytes(fields.get(_FIELDS["resume_page_token"].number, b"")).decode(),
    )


def _pooled(payload: memoryview) -> pa.Buffer:
    """payload copied into a new buffer of Arrow's memory pool (64-byte aligned)."""
    buffer = pa.allocate_buffer(len(payload))
    memoryview(buffer).cast("B")[:] = payload
    return buffer


def record_batches(
    messages: Iterator[StreamMessage],
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema from the first message and the record batches of those after it."""
    schema = pa.ipc.read_schema(pa.py_buffer(next(messages).arrow_ipc))

    def read() -> Iterator[pa.RecordBatch]:
        for message in messages:
            if message.row_count:
                ipc = pa.ipc.read_message(_pooled(message.arrow_ipc))
                yield pa.ipc.read_record_batch(ipc, schema)

    return schema, read()


class ResultStream:
    def __init__(self, channel: grpc.Channel) -> None:
        self._call = channel.unary_stream(
            METHOD,
            request_serializer=result_service_pb2.StreamResultRequest.SerializeToString,
            response_deserializer=decode,
        )

    def messages(
        self, request: result_service_pb2.StreamResultRequest, **call: Any
    ) -> Iterator[StreamMessage]:
        """The decoded messages; call takes metadata, timeout and the other call options."""
        yield from self._call(request, **call)

    def batches(
        self, request: result_service_pb2.StreamResultRequest, **call: Any
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The result's schema and its record batches, read as they arrive."""
        return record_batches(self.messages(request, **call))

    def read_all(self, request: result_service_pb2.StreamResultRequest, **call: Any) -> pa.Table:
        schema, batches = self.batches(request, **call)
        return pa.Table.from_batches(list(batches), schema)
