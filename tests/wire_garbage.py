"""Bytes that are no protobuf message of any type, and what the mesh answers to them."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2

from service_runtime.errors import ERROR_DOMAIN, status_details

#: A tag whose varint never ends; field 1 with wire type 7, which does not exist; field 1
#: announcing 16 bytes of which 3 follow.
CORRUPT_REQUESTS = (b"\xff\xff\xff", b"\x0f", b"\x0a\x10abc")


def assert_malformed(error: Any) -> None:
    """error (a failed call, synchronous or asyncio) is the mesh's answer to bytes that do not
    decode: INVALID_ARGUMENT with ErrorInfo reason MALFORMED_REQUEST."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "could not be decoded" in (error.details() or "")
    infos = []
    for detail in status_details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            infos.append((info.reason, info.domain))
    assert infos == [("MALFORMED_REQUEST", ERROR_DOMAIN)]
