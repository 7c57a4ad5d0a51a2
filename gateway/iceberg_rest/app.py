"""The read-only Iceberg REST endpoint's routes: the paths of the Iceberg REST catalog API that
read (config, namespaces, tables, a table's credentials), its OAuth2 token endpoint, and 403
for every write.

Each call carries a user's Texera token (``Authorization: Bearer``) or an access token of the
catalog's own (see callers), which the token endpoint issues for either, so that engines'
standard ``credential`` setting works. The call acts as that user at the registry, exactly as
a gRPC call through the gateway does, and at the user's rate limit. Errors follow the API's
ErrorModel.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from aiohttp import web

from catalog_map.registry import RegistryReader
from gateway.iceberg_rest.callers import IcebergCallers
from gateway.iceberg_rest.upstream import UNIT_SEPARATOR, CatalogUnreachable, UpstreamCatalog
from gateway.iceberg_rest.visibility import WarehouseView, warehouse_view
from gateway.rate_limit import RateLimiter
from service_runtime.auth import AuthenticationError
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from service_runtime.iceberg_errors import iceberg_error

log = logging.getLogger("gateway.iceberg_rest")

#: The registry's refusals, as HTTP statuses and the ErrorModel's types.
_STATUS = {
    grpc.StatusCode.NOT_FOUND: (404, "NoSuchWarehouseException"),
    grpc.StatusCode.INVALID_ARGUMENT: (400, "BadRequestException"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "ForbiddenException"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "NotAuthorizedException"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "TooManyRequestsException"),
    grpc.StatusCode.UNAVAILABLE: (503, "ServiceUnavailableException"),
}
READ_ONLY = "this catalog is read-only: results are written by Texera's executions alone"
#: What the token endpoint says its tokens are.
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a type name


@dataclass(frozen=True)
class Endpoint:
    """What the routes need: who the caller is, the registry, the catalog, the rate limit."""

    callers: IcebergCallers
    registry: RegistryReader
    catalog: UpstreamCatalog
    limits: RateLimiter


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def application(endpoint: Endpoint) -> web.Application:
    app = web.Application()
    as_user = _as_user(endpoint)
    prefix = "/v1/{prefix}/namespaces"
    table = prefix + "/{namespace}/tables/{table}"
    reads: list[tuple[str, Callable[[Endpoint, web.Request], Awaitable[web.StreamResponse]]]] = [
        ("/v1/config", config),
        (prefix, list_namespaces),
        (prefix + "/{namespace}", get_namespace),
        (prefix + "/{namespace}/tables", list_tables),
        (table, load_table),
        (table + "/credentials", table_credentials),
    ]
    for path, handler in reads:
        app.router.add_route("GET", path, as_user(handler))
    for path in (prefix + "/{namespace}", table):
        app.router.add_route("HEAD", path, as_user(_exists))
    app.router.add_route("POST", table + "/metrics", as_user(_metrics_accepted))
    app.router.add_route("POST", "/v1/oauth/tokens", token_endpoint(endpoint))
    app.router.add_route("*", "/v1/{tail:.*}", as_user(_read_only))
    return app


def _as_user(
    endpoint: Endpoint,
) -> Callable[[Callable[[Endpoint, web.Request], Awaitable[web.StreamResponse]]], Handler]:
    """Wraps a route: authenticates the caller, admits it at its rate, acts as it at the
    registry (the identity in the call's context) and maps the registry's refusals."""

    def wrap(route: Callable[[Endpoint, web.Request], Awaitable[web.StreamResponse]]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                identity = endpoint.callers.authenticate(request.headers.get("Authorization"), None)
            except AuthenticationError as exc:
                return iceberg_error(401, "NotAuthorizedException", str(exc))
            if (wait := endpoint.limits.admit(identity.user_id)) > 0:
                response = iceberg_error(429, "TooManyRequestsException", "over the rate limit")
                response.headers["Retry-After"] = str(max(1, round(wait)))
                return response
            acting = identity_var.set(identity)
            try:
                return await route(endpoint, request)
            except ServiceError as exc:
                status, kind = _STATUS.get(exc.code, (500, "InternalServerError"))
                message = exc.message if status < 500 else "the registry could not answer"
                return iceberg_error(status, kind, message)
            except CatalogUnreachable:
                return iceberg_error(
                    503, "ServiceUnavailableException", "the catalog did not answer"
                )
            finally:
                identity_var.reset(acting)

        return handle

    return wrap


async def _view(endpoint: Endpoint, request: web.Request) -> WarehouseView:
    return await warehouse_view(endpoint.registry, request.match_info["prefix"])


def _namespace(request: web.Request) -> str:
    return request.match_info["namespace"].replace(UNIT_SEPARATOR, ".")


async def config(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    """The catalog's config for a warehouse (by its id): its id is the prefix of every path."""
    warehouse_id = request.query.get("warehouse", "")
    if not warehouse_id:
        return iceberg_error(400, "BadRequestException", "name a warehouse (its id) in `warehouse`")
    view = await warehouse_view(endpoint.registry, warehouse_id)
    return web.json_response(
        {"defaults": {}, "overrides": {"prefix": view.binding.warehouse_id}},
    )


async def list_namespaces(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    view = await _view(endpoint, request)
    if request.query.get("parent"):
        return web.json_response({"namespaces": []})  # one level of namespaces only
    return web.json_response({"namespaces": [[name] for name in view.namespaces]})


async def get_namespace(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    view = await _view(endpoint, request)
    namespace = _namespace(request)
    if namespace not in view.namespaces:
        return iceberg_error(404, "NoSuchNamespaceException", f"no namespace {namespace}")
    return web.json_response({"namespace": [namespace], "properties": {}})


async def list_tables(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    view = await _view(endpoint, request)
    namespace = _namespace(request)
    if namespace not in view.namespaces:
        return iceberg_error(404, "NoSuchNamespaceException", f"no namespace {namespace}")
    identifiers = [{"namespace": [namespace], "name": name} for name in view.tables_in(namespace)]
    return web.json_response({"identifiers": identifiers})


async def _visible_table(
    endpoint: Endpoint, request: web.Request
) -> tuple[WarehouseView, str, str] | web.Response:
    view = await _view(endpoint, request)
    namespace, table = _namespace(request), request.match_info["table"]
    if (namespace, table) not in view.tables:
        return iceberg_error(404, "NoSuchTableException", f"no table {namespace}.{table}")
    return view, namespace, table


async def load_table(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    """The table's metadata from the warehouse's catalog, with storage credentials for it."""
    return await _from_catalog(endpoint, request, "")


async def table_credentials(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    return await _from_catalog(endpoint, request, "/credentials")


async def _from_catalog(endpoint: Endpoint, request: web.Request, suffix: str) -> web.Response:
    visible = await _visible_table(endpoint, request)
    if isinstance(visible, web.Response):
        return visible
    view, namespace, table = visible
    params = {name: request.query[name] for name in ("snapshots",) if name in request.query}
    answer = await endpoint.catalog.table(
        view.binding, namespace, table, suffix=suffix, params=params
    )
    if answer.status >= 500:
        log.warning("the catalog failed a table load", extra={"status": answer.status})
    return web.Response(
        status=answer.status, body=answer.body, headers={"Content-Type": answer.content_type}
    )


async def _exists(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    view = await _view(endpoint, request)
    namespace = _namespace(request)
    table = request.match_info.get("table")
    seen = (namespace, table) in view.tables if table else namespace in view.namespaces
    return web.Response(status=204 if seen else 404)


async def _metrics_accepted(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    """Engines report scan metrics after reading; they are taken and not kept."""
    visible = await _visible_table(endpoint, request)
    return visible if isinstance(visible, web.Response) else web.Response(status=204)


async def _read_only(endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
    if request.method in ("GET", "HEAD"):
        return iceberg_error(404, "NotFoundException", f"no such path: {request.path}")
    return iceberg_error(403, "ForbiddenException", READ_ONLY)


def token_endpoint(endpoint: Endpoint) -> Handler:
    """OAuth2's client-credentials grant, as the Iceberg REST API describes it: the client
    secret is the user's Texera token (or an access token), and the answer a new access token
    of the catalog's own. Engines configured with a `credential` (`<anything>:<token>`) get
    theirs here, and come back for a new one before it expires."""

    async def issue(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return _oauth_error(400, "unsupported_grant_type", "use client_credentials")
        try:
            user = endpoint.callers.user(f"Bearer {form.get('client_secret', '')}")
        except AuthenticationError:
            return _oauth_error(401, "invalid_client", "the client secret is not a valid token")
        token, expires = endpoint.callers.access_token(user.user_id)
        return web.json_response(
            {
                "access_token": token,
                "token_type": "bearer",
                "issued_token_type": ACCESS_TOKEN_TYPE,
                "expires_in": int(expires - time.time()),
            }
        )

    return issue


def _oauth_error(status: int, code: str, description: str) -> web.Response:
    return web.json_response({"error": code, "error_description": description}, status=status)
