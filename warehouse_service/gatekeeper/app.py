"""The gatekeeper's HTTP handling: a request authenticated by its execution token, classified
and checked (rules), the execution checked where the request writes (store), then forwarded to
the warehouse's catalog with the registry's identity (write access for the execution's own
tables, read access otherwise) and its answer passed back."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from cachetools import LRUCache

from service_runtime.auth import AuthenticationError
from service_runtime.iceberg_errors import iceberg_error
from warehouse_service.catalog.catalog_client import CatalogClient, Forwarded
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.domain.states import TERMINAL_STATES
from warehouse_service.gatekeeper import rules
from warehouse_service.gatekeeper.rules import Kind, Refused, Route, forbidden, no_such_table
from warehouse_service.gatekeeper.tokens import ExecutionGrant, GatekeeperTokens
from warehouse_service.store.db import Record
from warehouse_service.store.gatekeeper import GatekeeperStore

log = logging.getLogger("warehouse_service.gatekeeper")

#: Request headers passed on to the catalog (its token and project are the registry's).
_PASSED_HEADERS = ("Content-Type", "X-Iceberg-Access-Delegation")
_GONE = ("DELETING", "DELETED")
#: A commit's body may hold a large schema.
MAX_BODY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class _Target:
    """Where a request goes: the warehouse's catalog, with which access."""

    warehouse: Record
    write: bool


class Gatekeeper:
    def __init__(
        self, tokens: GatekeeperTokens, store: GatekeeperStore, catalog: CatalogClient
    ) -> None:
        self._tokens = tokens
        self._store = store
        self._catalog = catalog
        #: The catalog's prefix by (warehouse id, credential version).
        self._prefixes: LRUCache[tuple[str, int], str] = LRUCache(maxsize=10_000)
        #: (execution, table) pairs whose metadata was seen to name the execution.
        self._verified: LRUCache[tuple[str, tuple[str, ...]], bool] = LRUCache(maxsize=100_000)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/v1/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            grant = self._tokens.grant(request.headers.get("Authorization"))
        except AuthenticationError as exc:
            return iceberg_error(401, "NotAuthorizedException", str(exc))
        parts = [unquote(part) for part in request.rel_url.raw_parts[2:]]
        try:
            found = rules.route(request.method, parts)
            if found.kind is Kind.CONFIG:
                return self._config(grant, request)
            return await self._serve(grant, found, request)
        except Refused as refused:
            log.info(
                "catalog request refused",
                extra={
                    "execution_id": grant.execution_id,
                    "method": request.method,
                    "status": refused.status,
                    "reason": refused.message,
                },
            )
            return iceberg_error(refused.status, refused.error_type, refused.message)
        except (CatalogUnavailable, CatalogError) as exc:
            log.warning("catalog request not forwarded", extra={"error": str(exc)[:300]})
            return iceberg_error(503, "ServiceUnavailableException", "the catalog did not answer")

    def _config(self, grant: ExecutionGrant, request: web.Request) -> web.Response:
        if request.query.get("warehouse") != grant.warehouse_id:
            raise forbidden(f"this token reaches warehouse {grant.warehouse_id} alone")
        return web.json_response({"defaults": {}, "overrides": {"prefix": grant.warehouse_id}})

    async def _serve(
        self, grant: ExecutionGrant, found: Route, request: web.Request
    ) -> web.Response:
        if found.prefix != grant.warehouse_id:
            raise forbidden(f"this token reaches warehouse {grant.warehouse_id} alone")
        raw = await request.read() if request.can_read_body else b""
        body = _json(raw)
        target = await self._check(grant, found, body)
        changes_own = found.kind in (Kind.COMMIT_TABLE, Kind.PURGE_TABLE, Kind.TABLE_CREDENTIALS)
        if changes_own and target.write:  # (credentials of a source are read access)
            await self._verify_own(grant, found, target)
        answer = await self._forward(target, request, raw)
        if target.write and answer.status == 200 and request.method != "HEAD":
            if found.kind is Kind.CREATE_TABLE:  # its properties were checked
                self._verified[(grant.execution_id, rules.new_table(found, body))] = True
            elif found.kind is Kind.LOAD_TABLE:
                if not rules.belongs_to(grant, _json(answer.body).get("metadata")):
                    raise no_such_table(found.table_name)
                self._verified[(grant.execution_id, found.table_name)] = True
        return web.Response(status=answer.status, body=answer.body, content_type=_media(answer))

    async def _check(self, grant: ExecutionGrant, found: Route, body: Any) -> _Target:
        """What the request may reach, and with which access; Refused otherwise."""
        standing = await self._store.standing(grant.warehouse_id, grant.execution_id)
        if standing is None or standing["state"] in _GONE:
            raise forbidden(f"warehouse {grant.warehouse_id} is gone")
        match found.kind:
            case Kind.LOAD_NAMESPACE:
                rules.check_namespace(found.namespace)
                return _Target(standing, write=False)
            case Kind.CREATE_NAMESPACE:
                rules.check_new_namespace(body)
            case Kind.CREATE_TABLE:
                rules.check_new_table(grant, found, body)
            case Kind.LOAD_TABLE | Kind.TABLE_CREDENTIALS if found.table_name in grant.reads:
                return _Target(standing, write=False)
            case _ if not rules.is_own(grant, found.table_name):
                raise no_such_table(found.table_name)
            case Kind.COMMIT_TABLE:
                rules.check_commit(body)
        _check_running(grant, standing)
        return _Target(standing, write=True)

    async def _verify_own(self, grant: ExecutionGrant, found: Route, target: _Target) -> None:
        """A table named as the execution's must say it is, before it is changed or its
        credentials vended: another execution's id may sanitize to the same name."""
        key = (grant.execution_id, found.table_name)
        if key in self._verified:
            return
        prefix = await self._prefix(target.warehouse)
        try:
            loaded = await self._catalog.load_table(
                prefix, found.namespace, found.table, vended_credentials=False
            )
        except CatalogError as exc:
            if exc.status == 404:
                raise no_such_table(found.table_name) from exc
            raise
        if not rules.belongs_to(grant, loaded.get("metadata")):
            raise no_such_table(found.table_name)
        self._verified[key] = True

    async def _forward(self, target: _Target, request: web.Request, body: bytes) -> Forwarded:
        prefix = await self._prefix(target.warehouse)
        encoded = request.rel_url.raw_parts[3:]  # after /, v1 and the gatekeeper's prefix
        return await self._catalog.forward(
            request.method,
            "/".join([quote(prefix, safe=""), *encoded]),
            params=list(request.query.items()),
            body=body or None,
            headers={h: request.headers[h] for h in _PASSED_HEADERS if h in request.headers},
            catalog_warehouse_id=str(target.warehouse["catalog_warehouse_id"]),
            write=target.write,
        )

    async def _prefix(self, warehouse: Record) -> str:
        key = (str(warehouse["warehouse_id"]), int(warehouse["credential_version"]))
        if key not in self._prefixes:
            self._prefixes[key] = await self._catalog.prefix(warehouse["catalog_warehouse_name"])
        return self._prefixes[key]


def _check_running(grant: ExecutionGrant, standing: Record) -> None:
    """The execution is bound to the token's unit, for its submitter, in its warehouse, and
    has not ended."""
    if (
        standing["execution_state"] is None
        or str(standing["execution_warehouse_id"]) != grant.warehouse_id
        or standing["execution_unit_id"] != grant.unit_id
        or standing["execution_owner_user_id"] != grant.owner_user_id
    ):
        raise forbidden(f"execution {grant.execution_id} is not bound to this unit")
    if standing["execution_state"] in TERMINAL_STATES:
        raise forbidden(f"execution {grant.execution_id} has ended")


def _json(body: bytes) -> Any:
    if not body:
        return {}
    try:
        return json.loads(body)
    except ValueError as exc:
        raise Refused(400, "BadRequestException", "the body is not JSON") from exc


def _media(answer: Forwarded) -> str:
    return answer.content_type.split(";", 1)[0].strip() or "application/json"
