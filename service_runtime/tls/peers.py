"""Who is at the other end of a call, by its verified certificate, and the interceptor that
admits only the peers a server allows.

Only a server that requires client certificates knows its peers: without one, gRPC neither
asks for a client's certificate nor reports an identity. Health checks are let through (the
TLS handshake still wants a certificate from the client CAs): probes check a server's health
without being peers that call its API.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc
from grpc_health.v1 import health

from service_runtime.errors import ServiceError
from service_runtime.interceptors import Behavior, responses_of, rewrap
from service_runtime.tls.identity import AllowedPeers

#: Reported by gRPC of a peer whose verified certificate has exactly one URI SAN, a SPIFFE ID.
_PEER_SPIFFE_ID = "peer_spiffe_id"
_TRANSPORT_SECURITY_TYPE = "transport_security_type"


def peer_identity(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The SPIFFE ID of the call's peer, from its verified certificate; None over plaintext
    or when the peer showed no certificate naming one."""
    auth_context = context.auth_context()
    if list(auth_context.get(_TRANSPORT_SECURITY_TYPE, ())) != [b"ssl"]:
        return None
    ids = list(auth_context.get(_PEER_SPIFFE_ID, ()))
    return ids[0].decode() if len(ids) == 1 else None


def refuse_unless_allowed(
    allowed: AllowedPeers, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """Raises ServiceError for a call whose peer the allow-list does not name:
    UNAUTHENTICATED without an identity, PERMISSION_DENIED with another one."""
    peer = peer_identity(context)
    if peer is None:
        raise ServiceError(
            grpc.StatusCode.UNAUTHENTICATED,
            "this server takes calls only with a client certificate naming the caller",
            reason="PEER_UNAUTHENTICATED",
        )
    if not allowed.allows(peer):
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{peer} may not call this server",
            reason="PEER_NOT_ALLOWED",
        )


#: A check of one call before its handler runs: (the called gRPC service's full name, the
#: call); it raises ServiceError to refuse the call, itself or in the awaitable it returns.
CallCheckFunction = Callable[[str, grpc.aio.ServicerContext[Any, Any]], Awaitable[None] | None]


class CallCheck(grpc.aio.ServerInterceptor):
    """Runs check before the handler of every call but those to the exempt services. It runs
    inside the server interceptor, which logs, counts and answers its refusals."""

    def __init__(
        self, check: CallCheckFunction, exempt: frozenset[str] = frozenset({health.SERVICE_NAME})
    ) -> None:
        self._check = check
        self._exempt = exempt

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        service = handler_call_details.method.lstrip("/").rpartition("/")[0]
        if handler is None or service in self._exempt:
            return handler
        return rewrap(handler, partial(self._checked, service), handler.request_deserializer)

    def _checked(self, service: str, behavior: Behavior, kind: str) -> Behavior:
        async def check(call: grpc.aio.ServicerContext[Any, Any]) -> None:
            outcome = self._check(service, call)
            if outcome is not None:
                await outcome

        if kind.endswith("_stream"):

            async def streaming(
                request: Any, call: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                await check(call)
                async with responses_of(behavior, request, call) as responses:
                    async for response in responses:
                        yield response

            return streaming

        async def unary(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await check(call)
            response = behavior(request, call)
            return await response if inspect.isawaitable(response) else response

        return unary


class PeerAllowList(CallCheck):
    """Refuses every call (but health checks) from a peer the allow-list does not name."""

    def __init__(self, allowed: AllowedPeers) -> None:
        super().__init__(lambda service, call: refuse_unless_allowed(allowed, call))
