"""Runs the gateway: ``texera-lake-gateway``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import grpc

from catalog_map.registry import RegistryReader
from gateway.executions import ExecutionRoutes
from gateway.forwarding import Backend
from gateway.iceberg_rest.access import IcebergAccess
from gateway.iceberg_rest.app import Endpoint
from gateway.iceberg_rest.callers import IcebergCallers
from gateway.iceberg_rest.server import IcebergRestServer
from gateway.iceberg_rest.upstream import UpstreamCatalog
from gateway.rate_limit import RateLimiter
from gateway.readiness import readiness
from gateway.service import Admission, public_bindings
from gateway.settings import GatewaySettings
from gateway.units import UnitDirectory
from service_runtime.auth import UserTokenVerifier, Verifier
from service_runtime.config import ConfigError
from service_runtime.errors import ServiceError
from service_runtime.internal_tokens import GATEWAY_ISSUER, Exchange, TokenExchange, TokenSigner
from service_runtime.server import ServiceProcess, run_service
from service_runtime.tls.mesh_client import MeshClientTls
from service_runtime.tls.server_credentials import CertificateFiles

log = logging.getLogger("gateway")


@dataclass
class Parts:
    """What the gateway forwards to; made once its event loop runs."""

    warehouses: Backend
    results: Backend
    units: UnitDirectory
    reader: RegistryReader
    executions: ExecutionRoutes
    iceberg_access: IcebergAccess


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        tokens: TokenExchange,
        users: Verifier,
        limits: RateLimiter,
    ) -> None:
        self.settings = settings
        self.tokens = tokens
        #: Each user's rate limit, one for the gRPC port and the Iceberg REST catalog alike.
        self._limits = limits
        #: The Iceberg REST catalog's callers, when the gateway serves it.
        self._iceberg_callers = (
            IcebergCallers(users, settings.signing_key, tokens, settings.iceberg_token_seconds)
            if settings.iceberg_port
            else None
        )
        self._parts: Parts | None = None
        self._refreshing: asyncio.Task[None] | None = None
        self._iceberg: IcebergRestServer | None = None

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "the gateway is still starting")
        return self._parts

    async def start(self) -> None:
        settings = self.settings
        tls = MeshClientTls.from_settings(settings)
        reader = RegistryReader(settings.registry_target, tls=tls)
        units = UnitDirectory(reader.channel, self.tokens, tls=tls if settings.units_tls else None)
        warehouses = Backend(settings.warehouse_target, tls=tls)
        self._parts = Parts(
            warehouses=warehouses,
            results=Backend(settings.result_target, tls=tls),
            units=units,
            reader=reader,
            executions=ExecutionRoutes(units, reader, warehouses),
            iceberg_access=IcebergAccess(
                reader, self._iceberg_callers, settings.iceberg_catalog_uri
            ),
        )
        self._refreshing = asyncio.create_task(self._refresh_units())
        if self._iceberg_callers is not None:
            self._iceberg = self._iceberg_rest(reader, self._iceberg_callers)
            await self._iceberg.start()

    def _iceberg_rest(self, reader: RegistryReader, callers: IcebergCallers) -> IcebergRestServer:
        settings = self.settings
        trust = settings.catalog_trust()
        endpoint = Endpoint(
            callers,
            reader,
            UpstreamCatalog(trust.ssl_context() if trust.verify else False),
            self._limits,
        )
        certificate = (
            CertificateFiles(settings.tls_certificate, settings.tls_key)
            if settings.tls_certificate
            else None
        )
        return IcebergRestServer(endpoint, settings.host, settings.iceberg_port, certificate)

    async def _refresh_units(self) -> None:
        while True:
            try:
                await self.parts.units.refresh()
            except Exception as exc:  # the registry is down: keep the last list, try again
                log.warning("cannot list computing units", extra={"error": repr(exc)[:300]})
            await asyncio.sleep(self.settings.units_refresh_seconds)

    async def readiness(self) -> dict[str, bool]:
        parts = self.parts
        return await readiness(
            parts.warehouses.channel, parts.results.channel, parts.reader.channel, parts.units
        )

    async def stop(self) -> None:
        if self._iceberg is not None:
            await self._iceberg.stop()
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing
        if self._parts is not None:
            await self._parts.units.close()
            await self._parts.reader.close()
            for backend in (self._parts.warehouses, self._parts.results):
                await backend.close()


def build() -> ServiceProcess:
    settings = GatewaySettings.from_env()
    settings.validate()
    try:
        signer = TokenSigner(settings.signing_key, GATEWAY_ISSUER)
    except ValueError as exc:
        raise ConfigError(f"TEXERA_LAKE_GATEWAY_SIGNING_KEY_FILE: {exc}") from exc
    tokens = TokenExchange(signer, settings.internal_token_seconds)
    users = UserTokenVerifier(settings.jwt_secret)
    limits = RateLimiter(settings.rate_per_second, settings.rate_burst)
    gateway = Gateway(settings, tokens, users, limits)
    admission = Admission(limits)
    return ServiceProcess(
        name="gateway",
        settings=settings,
        authenticator=Exchange(users, tokens),
        services=public_bindings(
            lambda: gateway.parts.warehouses,
            lambda: gateway.parts.results,
            lambda: gateway.parts.executions,
            lambda: gateway.parts.iceberg_access,
            admission,
        ),
        on_start=gateway.start,
        on_stop=gateway.stop,
        readiness=gateway.readiness,
        readiness_interval_seconds=settings.health_interval_seconds,
    )


def main() -> None:
    run_service("gateway", build)


if __name__ == "__main__":
    main()
