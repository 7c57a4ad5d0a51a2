"""Requests that cannot be decoded, answered INVALID_ARGUMENT by the service.

A ``request_deserializer`` that raises makes grpc answer the call by itself, before
any interceptor or handler runs: UNKNOWN with the decoder's text, and an ERROR with a
traceback in the log. The server interceptor gives every handler a deserializer that
defers the failure instead (``deferring``): the handler is handed an Undecodable in
place of the request, which the interceptor answers INVALID_ARGUMENT with ErrorInfo
reason MALFORMED_REQUEST (errors.malformed_request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from service_runtime.errors import malformed_request

#: How much of the decoder's message a caller is told.
_CAUSE_CHARACTERS = 300

Deserializer = Callable[[bytes], Any]


@dataclass(frozen=True)
class Undecodable:
    """Stands in for a request message that could not be decoded."""

    cause: str


def deferring(deserializer: Deserializer) -> Deserializer:
    """deserializer, returning an Undecodable where it would raise."""

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # whatever the decoder raises, the bytes are the caller's fault
            return Undecodable(str(exc)[:_CAUSE_CHARACTERS] or type(exc).__name__)

    return deserialize


def checked(message_class: type[Message]) -> Callable[[bytes], bytes]:
    """A deserializer for handlers that relay requests as bytes: it checks that they decode
    as message_class and passes them on unchanged."""

    def check(raw: bytes) -> bytes:
        message_class.FromString(raw)
        return raw

    return check


def refuse(request: Any) -> None:
    """Raises INVALID_ARGUMENT (MALFORMED_REQUEST) if request could not be decoded."""
    if isinstance(request, Undecodable):
        raise malformed_request(request.cause)


async def decoded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A request stream that raises INVALID_ARGUMENT at its first undecodable message."""
    async for request in requests:
        refuse(request)
        yield request
