"""Forwarding a call to a backend as bytes: the request as the caller sent it, the answers as
the backend sent them, never parsed or encoded again.

The forwarded call carries the caller's token and request id and at most the
time the caller's deadline leaves. A backend's error reaches the caller with
its code, message and details. UNAVAILABLE is retried, with short waits,
only when the caller says the call is safe to repeat, and a stream only until
its first message arrived.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar, cast

import grpc

from service_runtime.auth import AUTHORIZATION_KEY, ON_BEHALF_KEY, bearer
from service_runtime.errors import ServiceError
from service_runtime.propagation import MESH_CHANNEL_OPTIONS, context_metadata, remaining_time
from service_runtime.repeat import repeat_while_unavailable
from service_runtime.tls.mesh_client import MeshClientTls, mesh_channel

T = TypeVar("T")

_CHANNEL_OPTIONS = (
    *MESH_CHANNEL_OPTIONS,
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)


async def _attempts(call: Callable[[], Awaitable[T]], retry: bool, what: str) -> T:
    """call() once, or repeated while UNAVAILABLE when retry; a backend's error is relayed as
    is."""
    try:
        return await (repeat_while_unavailable(call, what) if retry else call())
    except grpc.aio.AioRpcError as error:
        raise ServiceError.relayed(error) from error


async def _read(call: grpc.aio.UnaryStreamCall[bytes, bytes]) -> bytes | None:
    """The stream's next message; None once it ended."""
    message = await call.read()
    return None if message is grpc.aio.EOF else cast(bytes, message)


class Backend:
    """A service the gateway forwards to. The forwarded call carries the caller's internal
    token for the mesh, or the one token(), when given, makes for this backend alone (and
    on_behalf()'s, when given, in ON_BEHALF_KEY); over TLS with tls, else plaintext, the
    backend's certificate naming server_name when given (else target's host)."""

    def __init__(
        self,
        target: str,
        token: Callable[[], str] | None = None,
        *,
        on_behalf: Callable[[], str] | None = None,
        tls: MeshClientTls | None = None,
        server_name: str = "",
    ) -> None:
        self.channel = mesh_channel(target, tls, options=_CHANNEL_OPTIONS, server_name=server_name)
        self._token = token
        self._on_behalf = on_behalf
        self._unary: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {}
        self._streams: dict[str, grpc.aio.UnaryStreamMultiCallable[bytes, bytes]] = {}

    async def close(self) -> None:
        await self.channel.close()

    def _metadata(self) -> list[tuple[str, str]]:
        metadata = context_metadata()
        if self._token is None:
            return metadata
        own = [(k, v) for k, v in metadata if k != AUTHORIZATION_KEY] + [bearer(self._token())]
        return own if self._on_behalf is None else [*own, (ON_BEHALF_KEY, self._on_behalf())]

    async def unary(self, method: str, request: bytes, *, retry: bool) -> bytes:
        if method not in self._unary:
            self._unary[method] = self.channel.unary_unary(method)
        call = self._unary[method]

        async def attempt() -> bytes:
            answer: bytes = await call(request, metadata=self._metadata(), timeout=remaining_time())
            return answer

        return await _attempts(attempt, retry, method)

    async def stream(self, method: str, request: bytes, *, retry: bool) -> AsyncIterator[bytes]:
        if method not in self._streams:
            self._streams[method] = self.channel.unary_stream(method)
        open_stream = self._streams[method]
        opened: list[grpc.aio.UnaryStreamCall[bytes, bytes]] = []

        async def first_message() -> bytes | None:
            """Opens the stream and reads its first message; only this part is repeated, as a
            caller that has a message must not get it twice."""
            call = open_stream(request, metadata=self._metadata(), timeout=remaining_time())
            opened.append(call)
            return await _read(call)

        try:
            message = await _attempts(first_message, retry, method)
            while message is not None:
                yield message
                message = await _read(opened[-1])
        except grpc.aio.AioRpcError as error:
            raise ServiceError.relayed(error) from error
        finally:
            for call in opened:
                call.cancel()  # the caller went away: stop the backend's stream too
