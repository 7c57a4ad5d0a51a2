"""Who may do what: Lakekeeper's permission assignments (v0.13.3), the subset this catalog uses.

Assignments name a user (``{"type": "select", "user": "oidc~<client id>"}``);
roles are not supported. The client that bootstraps the catalog becomes its
server ``admin``, as in Lakekeeper. What each relation allows here:

- server ``admin`` / ``operator``: the management API and every warehouse;
- warehouse ``select``: reading the warehouse through the Iceberg REST API;
- warehouse ``create``, ``modify``, ``ownership``: reading and writing it;
- warehouse ``describe``, ``pass_grants``, ``manage_grants``: stored and
  listed, no catalog access of their own.

A warehouse-scoped token reaches its one warehouse, with its access, and
nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from sqlalchemy import Column, Engine, MetaData, String, Table, and_, delete, insert, select
from sqlalchemy.dialects.postgresql import insert as upsert

from embedded_stack.dev_catalog.errors import CatalogError, bad_request, forbidden
from embedded_stack.dev_catalog.state import CatalogState, json_body
from embedded_stack.dev_catalog.tokens import READ, WRITE, Principal, TokenIssuer

SERVER = "server"
SERVER_RELATIONS = ("admin", "operator")
WAREHOUSE_RELATIONS = (
    "ownership",
    "pass_grants",
    "manage_grants",
    "describe",
    "select",
    "create",
    "modify",
)
_GRANTS = {
    WRITE: {"ownership", "modify", "create"},
    READ: {"ownership", "modify", "create", "select"},
}

_metadata = MetaData()
_assignments = Table(
    "dev_catalog_assignments",
    _metadata,
    Column("resource", String(64), primary_key=True),  # "server" or a warehouse id
    Column("user_id", String(256), primary_key=True),
    Column("relation", String(32), primary_key=True),
)


class Assignments:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def ensure_schema(self) -> None:
        _metadata.create_all(self._engine)

    def relations(self, user_id: str, resources: Iterable[str]) -> set[tuple[str, str]]:
        """(resource, relation) pairs the user holds on the given resources."""
        query = select(_assignments.c.resource, _assignments.c.relation).where(
            and_(_assignments.c.user_id == user_id, _assignments.c.resource.in_(list(resources)))
        )
        with self._engine.connect() as connection:
            return {(row.resource, row.relation) for row in connection.execute(query)}

    def listed(self, resource: str, relations: list[str]) -> list[dict[str, str]]:
        query = select(_assignments).where(_assignments.c.resource == resource)
        if relations:
            query = query.where(_assignments.c.relation.in_(relations))
        with self._engine.connect() as connection:
            rows = connection.execute(query.order_by(_assignments.c.user_id)).all()
        return [{"type": row.relation, "user": row.user_id} for row in rows]

    def update(
        self, resource: str, writes: list[tuple[str, str]], deletes: list[tuple[str, str]]
    ) -> None:
        with self._engine.begin() as connection:
            for user_id, relation in deletes:
                connection.execute(
                    delete(_assignments).where(
                        and_(
                            _assignments.c.resource == resource,
                            _assignments.c.user_id == user_id,
                            _assignments.c.relation == relation,
                        )
                    )
                )
            for user_id, relation in writes:
                connection.execute(
                    upsert(_assignments)
                    .values(resource=resource, user_id=user_id, relation=relation)
                    .on_conflict_do_nothing()
                )

    def grant_admin(self, user_id: str) -> None:
        with self._engine.begin() as connection:
            connection.execute(
                insert(_assignments).values(resource=SERVER, user_id=user_id, relation="admin")
            )

    def forget(self, resource: str) -> None:
        with self._engine.begin() as connection:
            connection.execute(delete(_assignments).where(_assignments.c.resource == resource))


class Access:
    """The decisions: management API, and each warehouse's reads and writes."""

    def __init__(self, state: CatalogState, assignments: Assignments) -> None:
        self._state = state
        self._assignments = assignments

    async def _held(self, principal: Principal, warehouse_id: str | None = None) -> set[str]:
        resources = [SERVER] if warehouse_id is None else [SERVER, warehouse_id]
        pairs = await self._state.run(self._assignments.relations, principal.user_id, resources)
        server = {relation for resource, relation in pairs if resource == SERVER}
        if server & set(SERVER_RELATIONS):
            return set(_GRANTS[READ] | _GRANTS[WRITE])
        return {relation for resource, relation in pairs if resource != SERVER}

    async def require_management(self, principal: Principal) -> None:
        if principal.scope is not None:
            raise forbidden("a token scoped to one warehouse cannot use the management API")
        if not await self._held(principal):
            raise forbidden(f"{principal.user_id} may not use the management API")

    async def may_write(self, principal: Principal, warehouse_id: str) -> bool:
        """Whether the principal may write the warehouse (its vended credentials may too)."""
        try:
            await self.require_warehouse(principal, warehouse_id, WRITE)
        except CatalogError:
            return False
        return True

    async def require_warehouse(self, principal: Principal, warehouse_id: str, access: str) -> None:
        """Raises 403 unless the principal may read (or write) the warehouse."""
        scope = principal.scope
        if scope is not None:
            if scope.warehouse_id != warehouse_id:
                raise forbidden(f"the token is scoped to warehouse {scope.warehouse_id}")
            if access == WRITE and scope.access != WRITE:
                raise forbidden("the token grants read access only")
            return
        if not await self._held(principal, warehouse_id) & _GRANTS[access]:
            raise forbidden(f"{principal.user_id} may not {access} warehouse {warehouse_id}")


def _assignment(body: Any, relations: tuple[str, ...]) -> tuple[str, str]:
    if not isinstance(body, dict) or body.get("type") not in relations:
        raise bad_request("BadRequestException", f"an assignment's type must be one of {relations}")
    if "role" in body:
        raise bad_request("BadRequestException", "this catalog assigns users only, not roles")
    user = body.get("user")
    if not isinstance(user, str) or not user:
        raise bad_request("BadRequestException", "an assignment names a user")
    return user, str(body["type"])


class PermissionsApi:
    """``/management/v1/permissions/{server,warehouse/{id}}/assignments``; server admins only
    (the access middleware checks the management API)."""

    def __init__(self, state: CatalogState, assignments: Assignments) -> None:
        self._state = state
        self._assignments = assignments

    def routes(self) -> list[web.RouteDef]:
        base = "/management/v1/permissions"
        warehouse = base + "/warehouse/{warehouse_id}/assignments"
        return [
            web.get(base + "/server/assignments", self.get_server, allow_head=False),
            web.post(base + "/server/assignments", self.update_server),
            web.get(warehouse, self.get_warehouse, allow_head=False),
            web.post(warehouse, self.update_warehouse),
        ]

    async def _get(self, request: web.Request, resource: str) -> web.Response:
        relations = request.query.getall("relations", [])
        listed = await self._state.run(self._assignments.listed, resource, relations)
        return web.json_response({"assignments": listed})

    async def _update(
        self, request: web.Request, resource: str, relations: tuple[str, ...]
    ) -> web.Response:
        body = await json_body(request)
        writes = [_assignment(a, relations) for a in body.get("writes") or []]
        deletes = [_assignment(a, relations) for a in body.get("deletes") or []]
        await self._state.run(self._assignments.update, resource, writes, deletes)
        return web.Response(status=204)

    async def get_server(self, request: web.Request) -> web.Response:
        return await self._get(request, SERVER)

    async def update_server(self, request: web.Request) -> web.Response:
        return await self._update(request, SERVER, SERVER_RELATIONS)

    async def get_warehouse(self, request: web.Request) -> web.Response:
        record = await self._state.warehouse(request.match_info["warehouse_id"])
        return await self._get(request, record.id)

    async def update_warehouse(self, request: web.Request) -> web.Response:
        record = await self._state.warehouse(request.match_info["warehouse_id"])
        return await self._update(request, record.id, WAREHOUSE_RELATIONS)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def authentication(tokens: TokenIssuer, access: Access) -> Any:
    """Middleware: every management and catalog call needs a valid bearer token, and the
    principal's assignments (or its token's scope) must allow it."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if not path.startswith(("/management/", "/catalog/")):
            return await handler(request)
        principal = tokens.principal(request)
        request["principal"] = principal
        if path == "/management/v1/bootstrap":
            if principal.scope is not None:
                raise forbidden("a token scoped to one warehouse cannot bootstrap the catalog")
        elif path.startswith("/management/"):
            await access.require_management(principal)
        elif (prefix := request.match_info.get("prefix")) is not None:
            needed = READ if request.method in ("GET", "HEAD") else WRITE
            await access.require_warehouse(principal, prefix, needed)
        return await handler(request)

    return authenticate
