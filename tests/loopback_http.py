"""An aiohttp application served on a free loopback port, for tests that script an HTTP
server (a catalog, a token endpoint)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def served(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serves app until the block ends, over HTTPS with ssl_context; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
