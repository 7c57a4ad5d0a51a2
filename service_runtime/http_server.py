"""An aiohttp application served on a port of its own beside a service's gRPC port: over TLS
with the service's certificate when it has one, read again when its files change (checked each
second; new connections get the new certificate), plaintext otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

from aiohttp import web

from service_runtime.tls.server_credentials import CertificateFiles, FileStamp, load_certificate

log = logging.getLogger("service_runtime.http_server")

#: How often the certificate's files are checked for a rotation.
RELOAD_SECONDS = 1.0


class ReloadingServerContext:
    """A server SSL context whose certificate follows its files (TLS 1.2 or later)."""

    def __init__(self, files: CertificateFiles) -> None:
        self.files = files
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.set_alpn_protocols(["http/1.1"])
        self._stamp: FileStamp = files.stamp()
        self.context.load_cert_chain(files.certificate_chain, files.private_key)

    def reload_if_changed(self) -> None:
        """Loads the files again if they changed; keeps the current certificate if they do
        not hold together (a rotation half done)."""
        chain, key = self.files.certificate_chain, self.files.private_key
        try:
            stamp = self.files.stamp()
            if stamp == self._stamp:
                return
            # Checked first as the gRPC port checks them (a key only its owner reads, and that
            # matches the certificate): a pair that does not hold together would leave the
            # served context half changed.
            load_certificate(self.files)
            self.context.load_cert_chain(chain, key)
        except (OSError, ValueError, ssl.SSLError) as exc:
            log.warning("TLS certificate files not reloaded", extra={"reason": str(exc)})
            return
        self._stamp = stamp
        log.info("TLS certificate reloaded for an HTTP port")


class HttpServer:
    """Serves app on host:port; `what` names it in the logs."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        certificate: CertificateFiles | None,
        what: str,
    ) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._host, self._port = host, port
        self._tls = ReloadingServerContext(certificate) if certificate else None
        self._reloading: asyncio.Task[None] | None = None
        self._what = what

    async def start(self) -> None:
        await self._runner.setup()
        context = self._tls.context if self._tls else None
        await web.TCPSite(self._runner, self._host, self._port, ssl_context=context).start()
        if self._tls is not None:
            self._reloading = asyncio.create_task(self._reload_forever(self._tls))
        log.info(
            f"serving {self._what}",
            extra={"port": self._port, "transport": "tls" if self._tls else "plaintext"},
        )

    async def _reload_forever(self, tls: ReloadingServerContext) -> None:
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            tls.reload_if_changed()

    async def stop(self) -> None:
        if self._reloading is not None:
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
        await self._runner.cleanup()
