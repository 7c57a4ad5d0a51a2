"""The jobs done around every call a service serves, one step each: request ids, deadlines,
metrics and the call's log line, error mapping, authentication, decoding, the request's debug
log. The server interceptor (service_runtime.interceptors) runs them in order, each around the
next, then the handler.

A step may work around the rest of the call (`around`, a context manager: what comes after it
runs inside) and admit the call before its handler runs (`admit`: False refuses it, with the
error the step left on the scope).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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

ServicerContext = grpc.aio.ServicerContext[Any, Any]


class CallScope:
    """What one call carries from its start to its completion, shared by the steps."""

    def __init__(self, method: str, metadata: dict[str, str], streaming: str) -> None:
        self.method = method
        self.service, _, self.method_name = method.lstrip("/").rpartition("/")
        self.grpc_type = streaming
        supplied = metadata.get(REQUEST_ID_KEY, "")
        self.request_id = supplied if _REQUEST_ID_PATTERN.match(supplied) else uuid.uuid4().hex
        self.authorization = metadata.get(auth.AUTHORIZATION_KEY)
        self.on_behalf = metadata.get(auth.ON_BEHALF_KEY)
        self.code = grpc.StatusCode.OK
        #: The error the call ends with, once a step decided it.
        self.error: ServiceError | None = None
        self.public = self.service in PUBLIC_SERVICES


class CallStep:
    """A step that does nothing: each step overrides what its job needs."""

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        yield

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        return True


class RequestIds(CallStep):
    """The caller's request id (or a new one) in the call's context and sent back first."""

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        context.request_id_var.set(scope.request_id)
        yield

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        await call.send_initial_metadata(((REQUEST_ID_KEY, scope.request_id),))
        return True


class Deadlines(CallStep):
    """The call's deadline in its context, for the calls the handler makes in turn."""

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        remaining = call.time_remaining()
        context.deadline_var.set(None if remaining is None else time.monotonic() + remaining)
        yield


class Telemetry(CallStep):
    """The call counted and timed in the metrics, and its line in the log when it ends (INFO;
    DEBUG for health checks and reflection)."""

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
        labels = (scope.grpc_type, scope.service, scope.method_name)
        metrics.STARTED.labels(*labels).inc()
        metrics.IN_FLIGHT.labels(scope.service).inc()
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            metrics.IN_FLIGHT.labels(scope.service).dec()
            metrics.HANDLED.labels(*labels, scope.code.name).inc()
            metrics.HANDLING_SECONDS.labels(*labels).observe(elapsed)
            log.log(
                logging.DEBUG if scope.public else logging.INFO,
                "rpc finished",
                extra={
                    "rpc": scope.method,
                    "code": scope.code.name,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )


class ErrorMapping(CallStep):
    """What the handler raised, as the call's status: a ServiceError as it says, anything
    unexpected as INTERNAL with no internals in the message (logged with its traceback). A
    call the client ended (a cancelled stream) is CANCELLED."""

    @contextmanager
    def around(self, scope: CallScope, call: ServicerContext) -> Iterator[None]:
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


class Authentication(CallStep):
    """The caller's token verified, and its identity in the call's context (public services
    take none); UNAUTHENTICATED otherwise."""

    def __init__(self, authenticator: auth.Authenticator) -> None:
        self._authenticator = authenticator

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        if scope.public:
            return True
        try:
            identity = self._authenticator.authenticate(scope.authorization, scope.on_behalf)
        except auth.AuthenticationError as exc:
            scope.error = ServiceError(grpc.StatusCode.UNAUTHENTICATED, str(exc), reason=exc.reason)
            return False
        context.identity_var.set(identity)
        return True


class Decoding(CallStep):
    """A request that could not be decoded refused INVALID_ARGUMENT (see undecodable)."""

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        undecodable.refuse(request)
        return True


class RequestLog(CallStep):
    """The request, redacted, in the log at DEBUG."""

    async def admit(self, scope: CallScope, request: Any, call: ServicerContext) -> bool:
        if log.isEnabledFor(logging.DEBUG) and isinstance(request, Message):
            extra: dict[str, Any] = {"rpc": scope.method, "request": redacted_json(request)}
            if (remaining := call.time_remaining()) is not None:
                extra["timeout_ms"] = round(remaining * 1000)
            log.debug("rpc started", extra=extra)
        return True


def standard_steps(authenticator: auth.Authenticator) -> list[CallStep]:
    """The steps every service runs, outermost first."""
    return [
        RequestIds(),
        Deadlines(),
        Telemetry(),
        ErrorMapping(),
        Authentication(authenticator),
        Decoding(),
        RequestLog(),
    ]
