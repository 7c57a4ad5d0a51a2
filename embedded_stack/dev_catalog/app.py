"""The development catalog's HTTP application."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web
from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from embedded_stack.dev_catalog.catalogs import WarehouseCatalogs
from embedded_stack.dev_catalog.crypto import CredentialCipher
from embedded_stack.dev_catalog.errors import CatalogError, error_response
from embedded_stack.dev_catalog.faults import Faults
from embedded_stack.dev_catalog.management import ManagementApi
from embedded_stack.dev_catalog.oauth import TokenEndpoint
from embedded_stack.dev_catalog.permissions import (
    Access,
    Assignments,
    PermissionsApi,
    authentication,
)
from embedded_stack.dev_catalog.recording import recording
from embedded_stack.dev_catalog.rest import IcebergRestApi
from embedded_stack.dev_catalog.settings import DevCatalogSettings
from embedded_stack.dev_catalog.state import CatalogState, InjectedFailure
from embedded_stack.dev_catalog.store import CatalogStore
from embedded_stack.dev_catalog.tokens import TokenIssuer
from service_runtime.endpoint_guard import EndpointGuard

log = logging.getLogger("dev_catalog")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def answer_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the Iceberg error shape; the access log never shows bodies."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except CatalogError as exc:
        response = exc.response()
    except InjectedFailure as exc:
        response = exc.response
    except web.HTTPException as exc:
        response = error_response(
            exc.status,
            "BadRequestException" if exc.status < 500 else "InternalServerError",
            exc.reason,
        )
    except Exception as exc:
        log.exception("request failed", extra={"method": request.method, "path": request.path})
        response = error_response(500, *_internal_error(exc))
    log.info(
        "request",
        extra={
            "method": request.method,
            "path": request.path,
            "status": response.status,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        },
    )
    return response


def _internal_error(exc: Exception) -> tuple[str, str]:
    """The type and message of a 500 answer: its database failing is a DatabaseError, as in
    Lakekeeper. Only the kind of failure: its details (addresses, statements) stay in the log."""
    if isinstance(exc, SQLAlchemyError):
        cause = type(getattr(exc, "orig", None) or exc).__name__
        return "DatabaseError", f"the catalog's database failed ({cause}); see the catalog's log"
    return "InternalServerError", f"internal error ({type(exc).__name__}); see the catalog's log"


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def sqlalchemy_url(database_url: str) -> str:
    """A postgresql:// URL with the psycopg2 driver named, as SQLAlchemy wants it."""
    scheme, _, rest = database_url.partition("://")
    return f"postgresql+psycopg2://{rest}" if scheme in ("postgresql", "postgres") else database_url


def build_app(settings: DevCatalogSettings) -> web.Application:
    engine = create_engine(sqlalchemy_url(settings.database_url), pool_pre_ping=True, pool_size=10)
    store = CatalogStore(engine)
    store.ensure_schema()
    assignments = Assignments(engine)
    assignments.ensure_schema()
    cipher = CredentialCipher(settings.encryption_key)
    guard = EndpointGuard.from_setting(settings.allowed_storage_endpoints)
    state = CatalogState(
        store=store,
        catalogs=WarehouseCatalogs(engine, cipher, settings.credential_lifetime_seconds, guard),
        cipher=cipher,
        faults=Faults(),
        guard=guard,
    )
    tokens = TokenIssuer(settings.encryption_key, settings.token_lifetime_seconds)
    access = Access(state, assignments)
    # Recording comes first, so that it sees the answers errors become.
    recorder = [recording(Path(settings.record_file))] if settings.record_file else []
    app = web.Application(
        middlewares=[*recorder, answer_errors, authentication(tokens, access)],
        client_max_size=64 * 1024**2,
    )
    app.router.add_get("/health", health)
    app.add_routes(
        TokenEndpoint(
            state, settings.client_secrets(), tokens, access, scoped=settings.scoped_tokens
        ).routes()
    )
    app.add_routes(ManagementApi(state, assignments).routes())
    app.add_routes(PermissionsApi(state, assignments).routes())
    app.add_routes(IcebergRestApi(state, access, settings.page_size).routes())
    if settings.fault_injection:
        app.add_routes(state.faults.routes())

    async def use_more_threads(app: web.Application) -> None:
        # Blocking work (database, storage) runs in threads; one slow warehouse must not
        # take the few threads asyncio's default pool has.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))

    async def release(app: web.Application) -> None:
        engine.dispose()

    app.on_startup.append(use_more_threads)
    app.on_cleanup.append(release)
    return app
