"""The server interceptor every service runs: the call steps (service_runtime.call_steps:
request ids, deadlines, metrics and logs, error mapping, authentication, decoding), each around
the next, then the handler; and the helpers interceptors share to wrap a method's handler
whatever its streaming kind.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any

import grpc

from service_runtime import auth, undecodable
from service_runtime.call_steps import CallScope, CallStep, ServicerContext, standard_steps

Behavior = Callable[..., Any]
#: What a server interceptor hands a call on to: the next interceptor, or the handler.
Continuation = Callable[
    [grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any] | None"]
]


class ServerInterceptor(grpc.aio.ServerInterceptor):
    """Runs the call steps around every call (standard_steps unless given others)."""

    def __init__(
        self, authenticator: auth.Authenticator, steps: Sequence[CallStep] | None = None
    ) -> None:
        chosen = standard_steps(authenticator) if steps is None else steps
        # Only the steps that do something there: a step costs each call it wraps.
        self._arounds = tuple(s for s in chosen if type(s).around is not CallStep.around)
        self._admits = tuple(s for s in chosen if type(s).admit is not CallStep.admit)

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:  # unknown method: grpc answers UNIMPLEMENTED itself
            return handler
        metadata = {
            key: value
            for key, value in (handler_call_details.invocation_metadata or ())
            if isinstance(value, str)
        }
        deserializer = handler.request_deserializer
        return rewrap(
            handler,
            lambda behavior, kind: self._wrap(
                behavior, kind, handler_call_details.method, metadata
            ),
            None if deserializer is None else undecodable.deferring(deserializer),
        )

    def _wrap(
        self, behavior: Behavior, kind: str, method: str, metadata: dict[str, str]
    ) -> Behavior:
        if kind.startswith("stream_"):
            behavior = _with_decoded_requests(behavior)
        if kind.endswith("_stream"):

            async def streaming_behavior(request: Any, call: ServicerContext) -> AsyncIterator[Any]:
                scope = CallScope(method, metadata, kind)
                with self._around(scope, call):
                    if await self._admitted(scope, request, call):
                        result = behavior(request, call)
                        if inspect.isasyncgen(result):
                            async for response in result:
                                yield response
                        elif inspect.isawaitable(result):
                            await result
                await _finish(scope, call)

            return streaming_behavior

        async def unary_behavior(request: Any, call: ServicerContext) -> Any:
            scope = CallScope(method, metadata, kind)
            response = None
            with self._around(scope, call):
                if await self._admitted(scope, request, call):
                    response = behavior(request, call)
                    if inspect.isawaitable(response):  # generated base servicers are plain
                        response = await response
            await _finish(scope, call)
            return response

        return unary_behavior

    @contextmanager
    def _around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        """Every step's `around`, the first outermost."""
        with ExitStack() as stack:
            for step in self._arounds:
                stack.enter_context(step.around(scope, call))
            yield

    async def _admitted(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        """Every step's `admit` in turn, until one refuses."""
        for step in self._admits:
            if not await step.admit(scope, request, call):
                return False
        return True


async def _finish(scope: CallScope, call: ServicerContext) -> None:
    """Ends the call with the error a step left on the scope, if any."""
    if scope.error is not None:
        status = scope.error.to_status()
        await call.abort(status.code, status.details, status.trailing_metadata)


def _with_decoded_requests(behavior: Behavior) -> Behavior:
    """behavior, given a request stream that raises at an undecodable message."""

    def checked(requests: AsyncIterator[Any], call: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return behavior(undecodable.decoded(requests), call)

    return checked


def rewrap(
    handler: grpc.RpcMethodHandler[Any, Any],
    wrap: Callable[[Behavior, str], Behavior],
    request_deserializer: Callable[[bytes], Any] | None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """The same handler with its behavior wrapped, whatever its streaming kind, and with
    request_deserializer."""
    kinds: Sequence[tuple[str, Callable[..., grpc.RpcMethodHandler[Any, Any]]]] = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler),
        ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler),
        ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    for kind, make in kinds:
        behavior = getattr(handler, kind)
        if behavior is not None:
            return make(
                wrap(behavior, kind),
                request_deserializer=request_deserializer,
                response_serializer=handler.response_serializer,
            )
    raise ValueError("method handler has no behavior")


async def _none() -> AsyncIterator[Any]:
    return
    yield  # an async generator that yields nothing


@asynccontextmanager
async def responses_of(
    behavior: Behavior, request: Any, call: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[AsyncIterator[Any]]:
    """What a server-streaming handler yields, closed on leaving, in the caller's own task (a
    generator left to the garbage collector is closed in another task, outside the call's
    context); a handler that writes by itself is awaited, and yields nothing here."""
    responses = behavior(request, call)
    if not inspect.isasyncgen(responses):
        await responses
        yield _none()
        return
    try:
        yield responses
    finally:
        await responses.aclose()
