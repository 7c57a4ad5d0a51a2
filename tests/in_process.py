"""A service's gRPC server in the test's own process: the real RunningServer (interceptors,
options, health, reflection) on a free loopback port, for users' HS256 tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from service_runtime.auth import UserTokenVerifier
from service_runtime.config import ServerSettings
from service_runtime.server import RunningServer, ServiceBinding, ServiceProcess
from service_runtime.tls.held_certificate import HeldCertificate


@asynccontextmanager
async def serving(
    services: Sequence[ServiceBinding],
    jwt_secret: str,
    *,
    traced: bool = False,
    settings: ServerSettings | None = None,
    certificate: HeldCertificate | None = None,
) -> AsyncIterator[RunningServer]:
    """The server on settings (default: plaintext on a free loopback port), serving TLS with
    certificate when given."""
    running = RunningServer(
        ServiceProcess(
            name="test",
            settings=settings or ServerSettings(host="127.0.0.1", port=0),
            authenticator=UserTokenVerifier(jwt_secret),
            services=list(services),
            certificate=certificate,
        ),
        traced=traced,
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()
