"""Starting and stopping a service process.

A service hands its servicers to run_service(); this module adds what every
service has: the interceptor, grpc.health.v1 (SERVING while up, NOT_SERVING
while draining), server reflection, the metrics endpoint, and a graceful stop
on SIGTERM or SIGINT in which calls in flight may finish within the grace
period while new calls are refused.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service_runtime import auth, tracing, wire
from service_runtime.allocator import keep_freed_memory
from service_runtime.config import ConfigError, ServerSettings
from service_runtime.interceptors import ServerInterceptor
from service_runtime.logs import configure_logging
from service_runtime.metrics_endpoint import serve_metrics
from service_runtime.reflection import enable_reflection
from service_runtime.stream_writing import StreamWriting
from service_runtime.tls.held_certificate import HeldCertificate
from service_runtime.tls.peers import PeerAllowList
from service_runtime.tls.server_credentials import CertificateFiles, ReloadingCertificate

log = logging.getLogger("service_runtime.server")

#: How many calls may wait for the service to take them up. Past grpc's default (1,000, and at
#: random up to 3,000) grpc ends calls itself, CANCELLED with no details and no log line, before
#: any interceptor sees them: a burst from one client gets there. Below this, every call reaches
#: the service, which answers it (the gateway's rate limit with RESOURCE_EXHAUSTED), within the
#: call's deadline.
PENDING_CALLS = 100_000
#: The shortest interval at which a client may ping a connection that carries no data. grpc's
#: default (five minutes) ends a stream that stays quiet for two minutes (a long execution
#: watched), UNAVAILABLE "Too many pings", once its client keeps the connection alive as the
#: mesh's channels do, every 30 s.
MIN_PING_INTERVAL_MS = 10_000
_SERVER_OPTIONS = (
    ("grpc.server.max_pending_requests", PENDING_CALLS),
    ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
)


@dataclass(frozen=True)
class ServiceBinding:
    """One gRPC service to serve: its full name, its servicer and the generated adder."""

    name: str
    servicer: Any
    add_to_server: Callable[[Any, grpc.aio.Server], None]

    @classmethod
    def of(cls, servicer: Any) -> ServiceBinding:
        """Binds a servicer via its generated base class (``<Name>Servicer`` in ``*_pb2_grpc``).
        Its handlers may return encoded messages as well as message objects (see wire)."""
        for base in type(servicer).__mro__:
            if base.__module__.endswith("_pb2_grpc") and base.__name__.endswith("Servicer"):
                messages = importlib.import_module(base.__module__.removesuffix("_grpc"))
                service = messages.DESCRIPTOR.services_by_name[
                    base.__name__.removesuffix("Servicer")
                ]
                return cls(service.full_name, servicer, partial(_add, service=service))
        raise TypeError(f"{type(servicer).__name__} does not derive from a generated servicer")


def _add(servicer: Any, server: grpc.aio.Server, *, service: ServiceDescriptor) -> None:
    wire.add_service(servicer, service, server)


@dataclass
class ServiceProcess:
    """What a service process serves, and hooks around its life."""

    #: Short name used in logs, for example ``gateway``.
    name: str
    settings: ServerSettings
    #: Decides who each call (but health checks and reflection) comes from.
    authenticator: auth.Authenticator
    services: Sequence[ServiceBinding] = ()
    #: API services this process will serve but has no handlers for yet: listed
    #: by reflection, their calls (once authenticated) answered UNIMPLEMENTED.
    pending_services: Sequence[ServiceDescriptor] = ()
    #: Called before the server and its threads exist: work that forks (a JVM) belongs here,
    #: since forking next to gRPC's threads is not safe.
    prepare: Callable[[], None] | None = None
    #: Awaited after the port is bound and before health turns SERVING.
    on_start: Callable[[], Awaitable[None]] | None = None
    #: Awaited after the server stopped, to release resources.
    on_stop: Callable[[], Awaitable[None]] | None = None
    #: Polled once started: which of its services can serve now (they need other services).
    #: Health reports each service by it, and the server as a whole SERVING only when all can.
    readiness: Callable[[], Awaitable[Mapping[str, bool]]] | None = None
    readiness_interval_seconds: float = 2.0
    extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = field(default_factory=tuple)
    #: More servers of this process, each on a port of its own with its own settings (TLS
    #: included), callers and services: started after this one, stopped before it.
    companions: Sequence[ServiceProcess] = ()
    #: A certificate held in memory to serve TLS with, in place of the settings' files (a
    #: computing unit's, whose files are gone before users' code runs).
    certificate: HeldCertificate | None = None


def _unimplemented(service: ServiceDescriptor) -> grpc.GenericRpcHandler:
    """Handlers for every method of a service that answer UNIMPLEMENTED after the
    interceptor has authenticated the caller."""

    def not_yet(request: object, call: object) -> NoReturn:
        raise NotImplementedError

    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        method.name: wire.handler_factory(method.client_streaming, method.server_streaming)(not_yet)
        for method in service.methods
    }
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class RunningServer:
    """The gRPC server of a service process, with health and reflection."""

    def __init__(self, process: ServiceProcess, *, traced: bool = False) -> None:
        self.process = process
        # Without a destination for spans the tracing interceptor would still cost every call
        # about a tenth of its time in this process, for nothing.
        self.interceptors: list[grpc.aio.ServerInterceptor] = [
            StreamWriting(),  # the outermost: see stream_writing
            *([tracing.server_interceptor()] if traced else []),
            ServerInterceptor(process.authenticator),
            *([PeerAllowList(allowed)] if (allowed := process.settings.allowed_peers) else []),
            *process.extra_interceptors,
        ]
        self._server = grpc.aio.server(interceptors=self.interceptors, options=_SERVER_OPTIONS)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        for binding in process.services:
            binding.add_to_server(binding.servicer, self._server)
        self._server.add_generic_rpc_handlers(
            [_unimplemented(descriptor) for descriptor in process.pending_services]
        )
        enable_reflection(
            [
                *(b.name for b in process.services),
                *(descriptor.full_name for descriptor in process.pending_services),
                health.SERVICE_NAME,
            ],
            self._server,
        )
        self.port = 0
        self._readiness_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Binds the port, runs on_start, then reports SERVING."""
        settings = self.process.settings
        address = f"{settings.host}:{settings.port}"
        # grpc's health servicer starts out SERVING; nothing is ready before on_start has run.
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        credentials = _tls_credentials(self.process)
        try:
            if credentials is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on {address}: in use or not a local address") from exc
        if credentials is None:
            log.warning(
                "serving PLAINTEXT: calls, tokens and keys cross unencrypted and "
                "unauthenticated; for debugging only",
                extra={"server": self.process.name, "address": address},
            )
        await self._server.start()
        serve_metrics(settings)
        if self.process.on_start is not None:
            await self.process.on_start()
        if self.process.readiness is None:
            await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        else:
            await self._report_readiness()
            self._readiness_task = asyncio.create_task(self._watch_readiness())
        log.info(
            "serving",
            extra={
                "server": self.process.name,
                "address": address,
                "bound_port": self.port,
                "transport": "plaintext" if credentials is None else "tls",
            },
        )

    async def _report_readiness(self) -> None:
        assert self.process.readiness is not None
        try:
            ready = await self.process.readiness()
        except Exception:
            log.exception("readiness check failed")
            ready = {}
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        names = [b.name for b in self.process.services]
        for name in names:
            await self._health.set(name, serving if ready.get(name, False) else not_serving)
        everything = all(ready.get(name, False) for name in names)
        await self._health.set("", serving if everything else not_serving)

    async def _watch_readiness(self) -> None:
        while True:
            await asyncio.sleep(self.process.readiness_interval_seconds)
            await self._report_readiness()

    async def stop(self) -> None:
        """Reports NOT_SERVING, refuses new calls, lets calls in flight finish within the grace."""
        grace = self.process.settings.shutdown_grace_seconds
        log.info("stopping: draining calls in flight", extra={"grace_seconds": grace})
        if self._readiness_task is not None:
            self._readiness_task.cancel()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server.stop(grace)
        if self.process.on_stop is not None:
            await self.process.on_stop()
        log.info("stopped")

    async def _set_health(self, status: int) -> None:
        for name in ("", *(b.name for b in self.process.services)):
            await self._health.set(name, status)


def _tls_credentials(process: ServiceProcess) -> grpc.ServerCredentials | None:
    """The credentials of the service's TLS port: its held certificate, or its files,
    reloaded when they change; None when it has neither (plaintext)."""
    settings = process.settings
    require = settings.tls_require_client_certificate
    if process.certificate is not None:
        return process.certificate.server_credentials(require_client_certificate=require)
    if not settings.tls_certificate:
        return None
    files = CertificateFiles(settings.tls_certificate, settings.tls_key, settings.tls_client_ca)
    try:
        return ReloadingCertificate(files).server_credentials(require_client_certificate=require)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot serve TLS: {exc}") from exc


async def serve(process: ServiceProcess, *, traced: bool) -> None:
    """Serves until SIGTERM or SIGINT, then drains and returns; traced: spans go somewhere."""
    servers = [RunningServer(p, traced=traced) for p in (process, *process.companions)]
    for server in servers:
        await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    for server in reversed(servers):
        await server.stop()


def run_service(name: str, build: Callable[[], ServiceProcess]) -> None:
    """Entry point of a service's console script: configures logging, builds, serves."""
    configure_logging(name)
    keep_freed_memory()
    try:
        process = build()
        process.settings.validate()
        logging.getLogger().setLevel(process.settings.log_level.upper())
        if process.prepare is not None:
            process.prepare()
        # After prepare: exporting may start threads, and prepare may fork.
        tracer_provider = tracing.configure_tracing(name, process.settings)
        try:
            asyncio.run(serve(process, traced=tracer_provider is not None))
        finally:
            if tracer_provider is not None:
                tracer_provider.shutdown()  # sends the spans still buffered
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        sys.exit(2)
