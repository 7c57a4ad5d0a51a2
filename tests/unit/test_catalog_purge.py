"""Emptying and deleting a warehouse through the catalog client, against a scripted
Lakekeeper on loopback: paged listings, deactivated and missing warehouses, and delete-path
refusals reported as what they are."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest
from aiohttp import web

from tests.loopback_http import served
from texera.lake.v1 import warehouse_pb2
from warehouse_service.api.catalog_errors import catalog_delete_failure
from warehouse_service.catalog import catalog_purge
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.rest_tables import NAMESPACE_SEPARATOR
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NAME, ID, PREFIX = "texera-w", "7b1d3f52-0000-4000-8000-000000000001", "prefix-1"


def _paged(
    request: web.Request, items: Sequence[object], key: str, omit_last: bool
) -> web.Response:
    """One item per page; the last page omits next-page-token or sends it null."""
    start = int(request.query.get("pageToken", "0"))
    body: dict[str, object] = {key: items[start : start + 1]}
    if start + 1 < len(items):
        body["next-page-token"] = str(start + 1)
    elif not omit_last:
        body["next-page-token"] = None
    return web.json_response(body)


@dataclass
class ScriptedLakekeeper:
    """One warehouse with nested namespaces and tables, listed one item per page."""

    status: str = "active"
    exists: bool = True
    protected: bool = False
    namespaces: dict[tuple[str, ...], list[str]] = field(
        default_factory=lambda: {
            ("results",): ["r1", "r2", "r3"],
            ("results", "old"): ["o1"],
            ("runtime_stats",): ["s1", "s2"],
            ("console_logs",): [],
        }
    )
    delete_refusal: web.Response | None = None
    calls: list[str] = field(default_factory=list)

    def routes(self) -> list[web.RouteDef]:
        namespace = "/catalog/v1/{prefix}/namespaces/{namespace}"
        warehouse = "/management/v1/warehouse/{id}"
        return [
            web.get("/catalog/v1/config", self.config),
            web.get("/catalog/v1/{prefix}/namespaces", self.list_namespaces),
            web.get(namespace + "/tables", self.list_tables),
            web.delete(namespace + "/tables/{table}", self.drop_table),
            web.delete(namespace, self.drop_namespace),
            web.get(warehouse, self.get_warehouse),
            web.delete(warehouse, self.delete_warehouse),
            web.post(warehouse + "/activate", self.activate),
            web.post(warehouse + "/deactivate", self.deactivate),
        ]

    @web.middleware
    async def record(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.calls.append(f"{request.method} {request.path_qs}")
        if not self.exists:
            return _error(404, "WarehouseNotFound")
        if request.path.startswith("/catalog") and self.status != "active":
            return _error(404, "WarehouseNotFound")
        return await handler(request)

    async def config(self, request: web.Request) -> web.Response:
        return web.json_response({"defaults": {}, "overrides": {"prefix": PREFIX}})

    async def list_namespaces(self, request: web.Request) -> web.Response:
        parent = tuple(filter(None, request.query.get("parent", "").split(NAMESPACE_SEPARATOR)))
        children = [list(ns) for ns in self.namespaces if ns[:-1] == parent]
        return _paged(request, children, "namespaces", omit_last=bool(parent))

    async def list_tables(self, request: web.Request) -> web.Response:
        namespace = tuple(request.match_info["namespace"].split(NAMESPACE_SEPARATOR))
        identifiers = [
            {"namespace": list(namespace), "name": t} for t in self.namespaces[namespace]
        ]
        return _paged(request, identifiers, "identifiers", omit_last=False)

    async def drop_table(self, request: web.Request) -> web.Response:
        namespace = tuple(request.match_info["namespace"].split(NAMESPACE_SEPARATOR))
        self.namespaces[namespace].remove(request.match_info["table"])
        return web.Response(status=204)

    async def drop_namespace(self, request: web.Request) -> web.Response:
        namespace = tuple(request.match_info["namespace"].split(NAMESPACE_SEPARATOR))
        if self.namespaces[namespace]:
            return _error(409, "NamespaceNotEmptyException")
        del self.namespaces[namespace]
        return web.Response(status=204)

    async def get_warehouse(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"id": ID, "name": NAME, "status": self.status, "protected": self.protected}
        )

    async def delete_warehouse(self, request: web.Request) -> web.Response:
        if self.delete_refusal is not None:
            return self.delete_refusal
        if self.namespaces:
            return _error(409, "WarehouseNotEmpty")
        self.exists = False
        return web.Response(status=204)

    async def activate(self, request: web.Request) -> web.Response:
        self.status = "active"
        return web.Response(status=200)

    async def deactivate(self, request: web.Request) -> web.Response:
        self.status = "inactive"
        return web.Response(status=200)


def _error(status: int, error_type: str) -> web.Response:
    body = {"error": {"message": f"{error_type} here", "type": error_type, "code": status}}
    return web.json_response(body, status=status)


@asynccontextmanager
async def client_of(app: web.Application) -> AsyncIterator[CatalogClient]:
    """A catalog client of app, served on a free loopback port."""
    async with served(app) as base:
        client = CatalogClient(f"{base}/management", f"{base}/catalog", "p", backoff_seconds=0.01)
        await client.open()
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def lakekeeper() -> AsyncIterator[tuple[ScriptedLakekeeper, CatalogClient]]:
    scripted = ScriptedLakekeeper()
    app = web.Application(middlewares=[scripted.record])
    app.add_routes(scripted.routes())
    async with client_of(app) as client:
        yield scripted, client


async def test_every_page_of_every_listing_is_read(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    listed = await catalog_purge.contents(client, NAME, ID)
    assert listed == scripted.namespaces
    assert list(listed).index(("results", "old")) < list(listed).index(("results",))
    assert sum("pageToken=" in call for call in scripted.calls) >= 5


async def test_a_paged_warehouse_is_emptied_and_deleted(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    listed = await catalog_purge.contents(client, NAME, ID)
    await catalog_purge.empty(client, NAME, listed)
    await catalog_purge.delete(client, ID, wait_seconds=0)
    assert scripted.namespaces == {}
    assert not scripted.exists


async def test_a_deactivated_warehouse_is_activated_purged_and_deleted_without_waiting(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    scripted.status = "inactive"  # deactivated out of band
    with pytest.raises(CatalogError) as inactive:
        await client.prefix(NAME)
    assert inactive.value.status == 404

    started = time.monotonic()
    listed = await catalog_purge.contents(client, NAME, ID)
    await catalog_purge.empty(client, NAME, listed)
    await catalog_purge.delete(client, ID, wait_seconds=60)
    assert time.monotonic() - started < 5
    assert listed
    assert not scripted.exists
    assert f"POST /management/v1/warehouse/{ID}/activate" in scripted.calls


async def test_a_warehouse_already_gone_is_empty_and_deleted(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    scripted.exists = False
    assert await catalog_purge.contents(client, NAME, ID) == {}
    await catalog_purge.delete(client, ID, wait_seconds=60)


async def test_a_404_for_an_active_warehouse_is_not_taken_for_gone(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    scripted.status = "active-but-hidden"  # the catalog API refuses, the warehouse is not inactive
    with pytest.raises(CatalogError) as refused:
        await catalog_purge.contents(client, NAME, ID)
    assert refused.value.status == 404


async def test_a_400_on_delete_is_the_registrys_request_not_the_storage(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    scripted.namespaces.clear()
    scripted.delete_refusal = _error(400, "BadRequestException")
    with pytest.raises(CatalogError) as refused:
        await catalog_purge.delete(client, ID, wait_seconds=60)
    answer = catalog_delete_failure(refused.value)
    assert answer.code == grpc.StatusCode.INTERNAL
    assert answer.reason == "CATALOG_REFUSED_DELETE"
    assert answer.violations == ()
    assert answer.metadata == {"catalog_status": "400", "catalog_error": "BadRequestException"}


def _assert_protection_refusal(error: CatalogError) -> None:
    answer = catalog_delete_failure(error)
    assert answer.code == grpc.StatusCode.FAILED_PRECONDITION
    assert answer.reason == "WAREHOUSE_PROTECTED"
    assert answer.violations == ()
    assert answer.metadata["catalog_error"] == "WarehouseProtected"
    assert error.message in answer.message


# Lakekeeper answers 409; whatever the status, the type says why.
@pytest.mark.parametrize("status", [409, 400])
async def test_the_catalogs_refusal_to_delete_a_protected_warehouse_is_not_waited_out(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient], status: int
) -> None:
    scripted, client = lakekeeper
    scripted.namespaces.clear()
    scripted.delete_refusal = _error(status, "WarehouseProtected")
    started = time.monotonic()
    with pytest.raises(CatalogError) as refused:
        await catalog_purge.delete(client, ID, wait_seconds=60)
    assert time.monotonic() - started < 5
    assert scripted.calls.count(f"DELETE /management/v1/warehouse/{ID}") == 1
    _assert_protection_refusal(refused.value)


async def test_a_protected_warehouse_is_refused_before_anything_is_dropped(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    scripted, client = lakekeeper
    scripted.protected = True
    with pytest.raises(CatalogError) as refused:
        await catalog_purge.contents(client, NAME, ID)
    _assert_protection_refusal(refused.value)
    assert not [call for call in scripted.calls if not call.startswith("GET ")]
    assert scripted.namespaces[("results",)] == ["r1", "r2", "r3"]


async def test_a_warehouse_that_stays_busy_is_a_failed_precondition(
    lakekeeper: tuple[ScriptedLakekeeper, CatalogClient],
) -> None:
    _, client = lakekeeper
    with pytest.raises(CatalogError) as refused:
        await catalog_purge.delete(client, ID, wait_seconds=0)
    answer = catalog_delete_failure(refused.value)
    assert answer.code == grpc.StatusCode.FAILED_PRECONDITION
    assert answer.reason == "CATALOG_WAREHOUSE_BUSY"


def test_forbidden_deletes_keep_the_catalogs_reason() -> None:
    answer = catalog_delete_failure(CatalogError(403, "ForbiddenException", "not yours"))
    assert answer.code == grpc.StatusCode.PERMISSION_DENIED
    assert answer.metadata["catalog_error"] == "ForbiddenException"


async def test_the_create_body_carries_no_project_id() -> None:
    bodies: list[dict[str, object]] = []

    async def create(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        return web.json_response({"warehouse-id": ID}, status=201)

    app = web.Application()
    app.router.add_post("/management/v1/warehouse", create)
    async with client_of(app) as client:
        await client.create_warehouse(
            NAME,
            warehouse_pb2.S3StorageProfile(bucket="b", region="r"),
            warehouse_pb2.S3Credentials(access_key_id="k", secret_access_key="s"),
        )
    [body] = bodies
    assert "project-id" not in body
    assert body["warehouse-name"] == NAME


async def test_a_listing_that_never_ends_is_an_outage() -> None:
    async def looping(request: web.Request) -> web.Response:
        return web.json_response({"namespaces": [["a"]], "next-page-token": "same"})

    app = web.Application()
    app.router.add_get("/catalog/v1/{prefix}/namespaces", looping)
    async with client_of(app) as client:
        with pytest.raises(CatalogUnavailable, match="repeats a page token"):
            await client.namespaces(PREFIX)
