"""Serving the Iceberg REST endpoint on a port of its own in the gateway's process (see
service_runtime.http_server)."""

from __future__ import annotations

from gateway.iceberg_rest.app import Endpoint, application
from service_runtime.http_server import HttpServer
from service_runtime.tls.server_credentials import CertificateFiles


class IcebergRestServer:
    def __init__(
        self, endpoint: Endpoint, host: str, port: int, certificate: CertificateFiles | None
    ) -> None:
        self._endpoint = endpoint
        self._server = HttpServer(
            application(endpoint), host, port, certificate, "the Iceberg REST endpoint"
        )

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()
        await self._endpoint.catalog.close()
