"""The server interceptor every service runs: one scope around each call.

For each call it takes (or makes) the request id, verifies the caller's token,
makes the identity and request id visible to the handler and to log lines,
logs the call (the request redacted, at DEBUG), counts it in the metrics, and
turns what the handler raised into a status: a ServiceError into its code and
details, a request that cannot be decoded into INVALID_ARGUMENT (see undecodable),
anything unexpected into INTERNAL with no internals in the message. A call the
client ends (a cancelled stream) is logged as CANCELLED, at INFO like any other.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import grpc
from google.protobuf.message import Message

from service_runtime import auth, context, metrics, undecodable
from service_runtime.errors import ServiceError
from service_runtime.redaction import redacted_json

log = logging.getLogger("service_runtime.rpc")

REQUEST_ID_KEY = "x-request-id"
_REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

#: Services callable without a token: health checks and reflection (grpcurl).
PUBLIC_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }
)

Behavior = Callable[..., Any]
#: What a server interceptor hands a call on to: the next interceptor, or the handler.
Continuation = Callable[
    [grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any] | None"]
]


class _CallScope:
    """What one call carries from its start to its completion."""

    def __init__(self, method: str, metadata: dict[str, str], streaming: str) -> None:
        self.method = method
        self.service, _, self.method_name = method.lstrip("/").rpartition("/")
        self.grpc_type = streaming
        supplied = metadata.get(REQUEST_ID_KEY, "")
        self.request_id = supplied if _REQUEST_ID_PATTERN.match(supplied) else uuid.uuid4().hex
        self.authorization = metadata.get(auth.AUTHORIZATION_KEY)
        self.on_behalf = metadata.get(auth.ON_BEHALF_KEY)
        self.code = grpc.StatusCode.OK
        self.error: ServiceError | None = None
        self.public = self.service in PUBLIC_SERVICES


class ServerInterceptor(grpc.aio.ServerInterceptor):
    """Authentication, request ids, logs, metrics and error mapping for every call."""

    def __init__(self, authenticator: auth.Authenticator) -> None:
        self._authenticator = authenticator

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

            async def streaming_behavior(
                request: Any, call: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                scope = _CallScope(method, metadata, kind)
                with self._serving(scope, call):
                    if await self._admit(scope, request, call):
                        result = behavior(request, call)
                        if inspect.isasyncgen(result):
                            async for response in result:
                                yield response
                        elif inspect.isawaitable(result):
                            await result
                await self._finish(scope, call)

            return streaming_behavior

        async def unary_behavior(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
            scope = _CallScope(method, metadata, kind)
            response = None
            with self._serving(scope, call):
                if await self._admit(scope, request, call):
                    response = behavior(request, call)
                    if inspect.isawaitable(
                        response
                    ):  # generated base servicers are plain functions
                        response = await response
            await self._finish(scope, call)
            return response

        return unary_behavior

    async def _admit(
        self, scope: _CallScope, request: Any, call: grpc.aio.ServicerContext[Any, Any]
    ) -> bool:
        """Sends the request id back and verifies the caller; False if refused. Raises
        INVALID_ARGUMENT for a request that could not be decoded."""
        await call.send_initial_metadata(((REQUEST_ID_KEY, scope.request_id),))
        if not scope.public:
            try:
                context.identity_var.set(
                    self._authenticator.authenticate(scope.authorization, scope.on_behalf)
                )
            except auth.AuthenticationError as exc:
                scope.error = ServiceError(
                    grpc.StatusCode.UNAUTHENTICATED, str(exc), reason=exc.reason
                )
                return False
        undecodable.refuse(request)
        if log.isEnabledFor(logging.DEBUG) and isinstance(request, Message):
            extra: dict[str, Any] = {"rpc": scope.method, "request": redacted_json(request)}
            if (remaining := call.time_remaining()) is not None:
                extra["timeout_ms"] = round(remaining * 1000)
            log.debug("rpc started", extra=extra)
        return True

    @contextmanager
    def _serving(
        self, scope: _CallScope, call: grpc.aio.ServicerContext[Any, Any]
    ) -> Iterator[None]:
        labels = (scope.grpc_type, scope.service, scope.method_name)
        metrics.STARTED.labels(*labels).inc()
        metrics.IN_FLIGHT.labels(scope.service).inc()
        context.request_id_var.set(scope.request_id)
        remaining = call.time_remaining()
        context.deadline_var.set(None if remaining is None else time.monotonic() + remaining)
        started = time.perf_counter()
        try:
            yield
        except ServiceError as exc:
            scope.error = exc
        except grpc.aio.AbortError:
            code = call.code()
            scope.code = code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
            raise
        except (asyncio.CancelledError, GeneratorExit):  # GeneratorExit: a stream closed early
            scope.code = grpc.StatusCode.CANCELLED
            raise
        except NotImplementedError:
            scope.error = ServiceError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{scope.method} is not implemented by this server yet",
            )
        except Exception:
            log.exception("rpc failed unexpectedly", extra={"rpc": scope.method})
            scope.error = ServiceError(
                grpc.StatusCode.INTERNAL, f"internal error; request id {scope.request_id}"
            )
        finally:
            if scope.error is not None:
                scope.code = scope.error.code
            elapsed = time.perf_counter() - started
            metrics.IN_FLIGHT.labels(scope.service).dec()
            metrics.HANDLED.labels(*labels, scope.code.name).inc()
            metrics.HANDLING_SECONDS.labels(*labels).observe(elapsed)
            level = logging.DEBUG if scope.public else logging.INFO
            log.log(
                level,
                "rpc finished",
                extra={
                    "rpc": scope.method,
                    "code": scope.code.name,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )

    @staticmethod
    async def _finish(scope: _CallScope, call: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Ends the call with the error the scope caught, if any."""
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
