"""The /metrics endpoint: prometheus_client's WSGI app, served on a thread of its own.

With a metrics token (``TEXERA_LAKE_<SCOPE>_METRICS_TOKEN_FILE``), it answers only requests
that carry ``Authorization: Bearer <token>``. Without one it answers anyone, since users' code
may reach the port (a Spark task on the same host reaches loopback), so it leaves out every
family whose series name a tenant (service_runtime.metrics.TENANT_FAMILIES).
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
from collections.abc import Iterable, Iterator
from socketserver import BaseRequestHandler
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric

from service_runtime.config import ServerSettings
from service_runtime.metrics import TENANT_FAMILIES

log = logging.getLogger("service_runtime.metrics_endpoint")

#: The whole answer to a request without the token: nothing of the metrics.
REFUSAL = b"/metrics takes a bearer token\n"


class Withholding:
    """A view of a registry without some families. It also narrows to the names a scrape
    asks for (``?name[]=``), as make_wsgi_app asks through restricted_registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        withheld: frozenset[str],
        names: frozenset[str] | None = None,
    ) -> None:
        self._registry = registry
        self._withheld = withheld
        self._names = names

    def collect(self) -> Iterator[Metric]:
        source = self._registry
        narrowed = source if self._names is None else source.restricted_registry(self._names)
        return (family for family in narrowed.collect() if family.name not in self._withheld)

    def restricted_registry(self, names: Iterable[str]) -> Withholding:
        return Withholding(self._registry, self._withheld, frozenset(names))


def bearer_required(app: WSGIApplication, token: str) -> WSGIApplication:
    """app, for requests whose Authorization header is ``Bearer <token>`` only; any other
    gets 401 with ``WWW-Authenticate: Bearer`` and never reaches app."""
    expected = token.encode()

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        scheme, _, given = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        # WSGI gives headers as latin-1 text: encoding it back yields the bytes sent.
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("latin-1"), expected
        ):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("WWW-Authenticate", 'Bearer realm="metrics"'),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(REFUSAL))),
            ],
        )
        return [REFUSAL]

    return guarded


def metrics_app(token: str) -> WSGIApplication:
    """Every metric, to the token's holders; with no token, to anyone, all but the families
    that name a tenant."""
    if token:
        return bearer_required(make_wsgi_app(REGISTRY), token)
    return make_wsgi_app(Withholding(REGISTRY, TENANT_FAMILIES))


class _Server(ThreadingWSGIServer):
    """prometheus_client's server (a daemon thread per request), of the host's address family
    (IPv6 for ``::``)."""

    def __init__(self, address: tuple[str, int], handler: type[BaseRequestHandler]) -> None:
        host, port = address
        [(family, *_), *_] = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        self.address_family = family
        super().__init__(address, handler)


class _QuietHandler(WSGIRequestHandler):
    """Writes no line per request: the service's log is JSON lines."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(settings: ServerSettings) -> None:
    """Serves /metrics at the service's host and metrics port on a daemon thread; port 0
    leaves it off."""
    if not settings.metrics_port:
        return
    if not settings.metrics_token:
        log.warning(
            "metrics served without authentication: figures naming a warehouse are withheld",
            extra={"setting": settings.variable_of("metrics_token")},
        )
    server = make_server(
        settings.host,
        settings.metrics_port,
        metrics_app(settings.metrics_token),
        _Server,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
