"""Forwarding a call to a backend as bytes: the request as the caller sent it, the answers as
the backend sent them, never parsed or encoded again.

The forwarded call carries the caller's token and request id and at most the
time the caller's deadline leaves. A backend's error reaches the caller with
its code, message and details. UNAVAILABLE is retried, with short waits,
only when the caller says the call is safe to repeat, and a stream only until
its first message arrived.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc

from service_runtime.auth import AUTHORIZATION_KEY, bearer
from service_runtime.errors import ServiceError
from service_runtime.propagation import context_metadata, remaining_time

#: Waits before the second and third attempts of a call that may be repeated.
RETRY_WAITS = (0.1, 0.4)
_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)


def _again(error: grpc.aio.AioRpcError, retry: bool, wait: float | None) -> bool:
    """Whether to try again after error: UNAVAILABLE, allowed, attempts and time left."""
    if not retry or wait is None or error.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    left = remaining_time()
    return left is None or left > wait


class Backend:
    """A service the gateway forwards to. The forwarded call carries the caller's internal
    token for the mesh, or the one token(), when given, makes for this backend alone."""

    def __init__(self, target: str, token: Callable[[], str] | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._token = token
        self._unary: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {}
        self._streams: dict[str, grpc.aio.UnaryStreamMultiCallable[bytes, bytes]] = {}

    async def close(self) -> None:
        await self.channel.close()

    def _metadata(self) -> list[tuple[str, str]]:
        metadata = context_metadata()
        if self._token is None:
            return metadata
        return [(k, v) for k, v in metadata if k != AUTHORIZATION_KEY] + [bearer(self._token())]

    async def unary(self, method: str, request: bytes, *, retry: bool) -> bytes:
        if method not in self._unary:
            self._unary[method] = self.channel.unary_unary(method)
        call = self._unary[method]
        for wait in (*RETRY_WAITS, None):
            try:
                answer: bytes = await call(
                    request, metadata=self._metadata(), timeout=remaining_time()
                )
            except grpc.aio.AioRpcError as error:
                if not _again(error, retry, wait):
                    raise ServiceError.relayed(error) from error
                await asyncio.sleep(wait or 0)
            else:
                return answer
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def stream(self, method: str, request: bytes, *, retry: bool) -> AsyncIterator[bytes]:
        if method not in self._streams:
            self._streams[method] = self.channel.unary_stream(method)
        open_stream = self._streams[method]
        for wait in (*RETRY_WAITS, None):
            call = open_stream(request, metadata=self._metadata(), timeout=remaining_time())
            received = False
            try:
                async for message in call:
                    received = True
                    yield message
                return
            except grpc.aio.AioRpcError as error:
                if received or not _again(error, retry, wait):
                    raise ServiceError.relayed(error) from error
            finally:
                call.cancel()  # the caller went away: stop the backend's stream too
            await asyncio.sleep(wait or 0)
