"""The messages of one StreamResult, read and encoded off the event loop.

Data files are read ahead on their own threads (see prefetch); each chunk is cut
into record batches that fit a message, and each message is encoded straight
into protobuf's wire format around its Arrow IPC payload: one copy of the data
from Arrow into the message, instead of the several a message object costs.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass

import pyarrow as pa

from result_service import arrow_ipc
from result_service.file_reader import Chunk
from result_service.metrics import STREAMED_BYTES, STREAMED_ROWS
from result_service.scan import Position, Scan
from result_service.tokens import RowTokens
from texera.lake.v1 import result_service_pb2

_FIELDS = result_service_pb2.StreamResultResponse.DESCRIPTOR.fields_by_name
_LENGTH_DELIMITED, _VARINT = 2, 0


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # an int64 below zero is sent as its two's complement
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(name: str, wire_type: int) -> bytes:
    return _varint(_FIELDS[name].number << 3 | wire_type)


_IPC, _ROWS = _tag("arrow_ipc", _LENGTH_DELIMITED), _tag("row_count", _VARINT)
_SNAPSHOT, _RESUME = _tag("snapshot_id", _VARINT), _tag("resume_page_token", _LENGTH_DELIMITED)


def encode_response(
    payload: bytes | pa.Buffer, row_count: int, snapshot_id: int, resume: str
) -> bytes:
    """A StreamResultResponse in wire format, as SerializeToString would write it."""
    parts: list[bytes | pa.Buffer] = [_IPC, _varint(len(payload)), payload] if len(payload) else []
    if row_count:
        parts += [_ROWS, _varint(row_count)]
    if snapshot_id:
        parts += [_SNAPSHOT, _varint(snapshot_id)]
    if resume:
        token = resume.encode()
        parts += [_RESUME, _varint(len(token)), token]
    return b"".join(parts)


@dataclass
class EncodedStream:
    #: The rows' schema, sent first even when there are no rows.
    schema: pa.Schema
    scan: Scan | None
    start: Position
    snapshot_id: int
    tokens: RowTokens
    request_fingerprint: str
    batch_rows: int
    message_bytes: int
    #: Rows to send at most; 0 for all.
    limit: int
    files_at_once: int

    def __post_init__(self) -> None:
        self._prefetcher = (
            self.scan.read_ahead(self.start, self.files_at_once) if self.scan is not None else None
        )

    def messages(self) -> Iterator[bytes]:
        """The schema, a message per record batch, the end marker; blocking."""
        yield encode_response(arrow_ipc.schema_message(self.schema), 0, self.snapshot_id, "")
        resume = ""
        if self.scan is not None and self._prefetcher is not None:
            resume = yield from self._batches(self.scan, self._prefetcher.items())
        yield encode_response(arrow_ipc.END_OF_STREAM, 0, self.snapshot_id, resume)

    def _batches(
        self, scan: Scan, chunks: Iterator[tuple[int, Chunk]]
    ) -> Generator[bytes, None, str]:
        """The batch messages; returns the token that resumes after the last of them."""
        sent, resume = 0, ""
        for index, chunk in chunks:
            rows = chunk.rows
            if self.limit:
                rows = rows.slice(0, self.limit - sent)
            taken = 0
            for piece in arrow_ipc.split(rows, self.batch_rows, self.message_bytes):
                taken += piece.num_rows
                after = scan.remaining(Position(index, chunk.position_after(taken)))
                resume = (
                    self.tokens.issue(self.request_fingerprint, scan.plan, after) if after else ""
                )
                payload = piece.serialize()
                STREAMED_ROWS.inc(piece.num_rows)
                STREAMED_BYTES.inc(payload.size)
                yield encode_response(payload, piece.num_rows, self.snapshot_id, resume)
            sent += taken
            if self.limit and sent >= self.limit:
                return resume
        return ""  # every row was sent

    def close(self) -> None:
        """Stops reading; blocking (joins the read-ahead threads)."""
        if self._prefetcher is not None:
            self._prefetcher.close()
