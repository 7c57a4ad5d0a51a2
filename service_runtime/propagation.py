"""Channels for calls between services that carry the served call's context.

An outgoing call made while serving a call carries that call's request id and trace context,
its caller's token (so the callee authorizes the same user) and at most the
time the served call has left before its deadline. Metadata or a timeout the
caller passes explicitly wins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import grpc

from service_runtime import context, tracing
from service_runtime.auth import ON_BEHALF_KEY, bearer
from service_runtime.call_steps import REQUEST_ID_KEY
from service_runtime.tls.mesh_client import MeshClientTls, mesh_channel

T = TypeVar("T")

#: Options of every channel between services. A service that restarts is reached again within
#: a second: gRPC's own reconnect backoff grows to two minutes, far too long inside the mesh.
MESH_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)
_CHANNEL_OPTIONS = (
    *MESH_CHANNEL_OPTIONS,
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)


def context_metadata(credential: str | None = None) -> list[tuple[str, str]]:
    """The request id and caller token of the call being served, as metadata. With a
    credential (a computing unit's own), the call is made with it, for the user being served
    if there is one."""
    metadata = tracing.trace_metadata()
    if request_id := context.request_id_var.get():
        metadata.append((REQUEST_ID_KEY, request_id))
    identity = context.identity_var.get()
    if credential is None:
        if identity is not None and identity.token:
            metadata.append(bearer(identity.token))
        return metadata
    metadata.append(bearer(credential))
    if identity is not None and identity.is_user and identity.token:
        metadata.append((ON_BEHALF_KEY, identity.token))
    return metadata


def remaining_time(timeout: float | None = None) -> float | None:
    """The time the served call has left (at most timeout); None without a deadline."""
    deadline = context.deadline_var.get()
    if deadline is None:
        return timeout
    remaining = max(deadline - time.monotonic(), 0.0)
    return remaining if timeout is None else min(timeout, remaining)


def beyond_the_call(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task for work that goes on after the served call has ended (the execution a
    submission starts): it keeps the call's request id and whom it serves (for log lines), but
    neither its deadline, which would cut every later outgoing call short, nor the caller's
    token, which lives minutes while the work may run for hours: its outgoing calls carry the
    service's own credential alone."""

    async def run() -> T:
        # The task's own copy of the call's context.
        context.deadline_var.set(None)
        if (identity := context.identity_var.get()) is not None:
            context.identity_var.set(identity.without_token())
        return await work

    return asyncio.create_task(run())


#: A service's own credential: fixed, or asked for anew at each call (one that is renewed).
Credential = str | Callable[[], str]


def _with_context(
    details: grpc.aio.ClientCallDetails, credential: Credential | None
) -> grpc.aio.ClientCallDetails:
    explicit = list(details.metadata or ())
    present = {key for key, _ in explicit}
    current = credential() if callable(credential) else credential
    inherited = [(key, value) for key, value in context_metadata(current) if key not in present]
    return grpc.aio.ClientCallDetails(
        method=details.method,
        timeout=remaining_time(details.timeout),
        metadata=grpc.aio.Metadata(*explicit, *inherited),
        credentials=details.credentials,
        wait_for_ready=details.wait_for_ready,
    )


class _ContextInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
):
    def __init__(self, credential: Credential | None) -> None:
        self._credential = credential

    async def intercept_unary_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return await continuation(_with_context(client_call_details, self._credential), request)

    async def intercept_unary_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return await continuation(_with_context(client_call_details, self._credential), request)


def service_channel(
    target: str,
    options: Sequence[tuple[str, Any]] = (),
    *,
    credential: Credential | None = None,
    tls: MeshClientTls | None = None,
) -> grpc.aio.Channel:
    """A channel to another service of the mesh that propagates the call context, over TLS
    with tls (else plaintext); with a credential, calls are made with it, as it is at each
    call (see context_metadata)."""
    return mesh_channel(
        target,
        tls,
        options=[*_CHANNEL_OPTIONS, *options],
        interceptors=[_ContextInterceptor(credential)],
    )
