"""Server streams written by the call's own task, so that a stream the client ends is closed
where it was opened.

grpc drives a handler's async generator itself. When the client cancels while grpc is
sending (rather than while the generator awaits), the send fails before grpc has learnt of the
cancellation: it logs an ERROR with a traceback (ExecuteBatchError) and leaves the generators
suspended, for the garbage collector to close later in another task, where the tracing
interceptor cannot restore its context (another ERROR) and the call is no longer counted as
cancelled. This interceptor, the outermost, writes each message itself instead: a send that
fails ends the call as cancelled (which grpc logs at DEBUG), and the generators are closed at
once, in the call's task.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from service_runtime.interceptors import Behavior, Continuation, responses_of, rewrap


class StreamWriting(grpc.aio.ServerInterceptor):
    """Writes the responses of every server-streaming handler from the call's task."""

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        return rewrap(
            handler, lambda behavior, kind: _written(behavior), handler.request_deserializer
        )


def _written(behavior: Behavior) -> Behavior:
    """A coroutine that writes what behavior yields, and closes it whatever happens."""

    async def write(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> None:
        async with responses_of(behavior, request, call) as responses:
            async for response in responses:
                try:
                    await call.write(response)
                except Exception as exc:
                    # The stream is over: its client cancelled, went away or ran out of time.
                    raise asyncio.CancelledError from exc

    return write
