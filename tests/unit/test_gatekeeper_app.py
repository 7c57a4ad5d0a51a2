"""The catalog gatekeeper's HTTP handling, between a scripted catalog and a client on loopback:
what it forwards, with which access, what it answers itself, and a catalog that refused the
registry's token once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lake_tables.naming import EXECUTION_ID, result_table
from service_runtime.internal_tokens import generate_private_key
from tests.loopback_http import served
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.gatekeeper.app import Gatekeeper
from warehouse_service.gatekeeper.tokens import ExecutionGrant, GatekeeperTokens
from warehouse_service.store.gatekeeper import GatekeeperStore

WAREHOUSE = str(uuid.uuid4())
GRANT = ExecutionGrant("ex-1", WAREHOUSE, "cu-1", "alice", frozenset({("results", "source")}))
OWN = result_table("ex-1", "out")


@dataclass
class ScriptedCatalog:
    """The warehouse's catalog: a config, tables by name (their properties), and refusals of
    the registry's token to answer first."""

    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    refusals: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/config", self.config)
        app.router.add_route("*", "/v1/upstream/namespaces/{ns}/tables/{table}", self.table)
        return app

    async def config(self, request: web.Request) -> web.Response:
        return web.json_response({"defaults": {}, "overrides": {"prefix": "upstream"}})

    async def table(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.match_info["table"]))
        if self.refusals:
            self.refusals -= 1
            return web.json_response(
                {"error": {"code": 401, "type": "x", "message": "no"}}, status=401
            )
        properties = self.properties.get(request.match_info["table"])
        if properties is None:
            return web.json_response(
                {"error": {"code": 404, "type": "x", "message": "no"}}, status=404
            )
        return web.json_response({"metadata": {"properties": properties}, "config": {}})


class Standing(GatekeeperStore):
    """The registry's database as the gatekeeper reads it: the warehouse, and the execution in
    the state given."""

    def __init__(self, state: str | None = "RUNNING") -> None:
        self.state = state

    async def standing(self, warehouse_id: str, execution_id: str) -> Any:
        bound = self.state is not None
        return {
            "warehouse_id": warehouse_id,
            "catalog_warehouse_id": "c-1",
            "catalog_warehouse_name": "texera-w",
            "state": "ACTIVE",
            "credential_version": 1,
            "execution_warehouse_id": warehouse_id if bound else None,
            "execution_unit_id": "cu-1" if bound else None,
            "execution_owner_user_id": "alice" if bound else None,
            "execution_state": self.state,
        }


@dataclass
class Served:
    base: str
    token: str
    catalog: ScriptedCatalog
    store: Standing

    async def call(
        self, method: str, path: str, token: str | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token if token is not None else self.token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, f"{self.base}/v1/{path}", headers=headers, **kwargs
            ) as response,
        ):
            return response.status, await response.json(
                content_type=None
            ) if response.status != 204 else None


@pytest.fixture
async def gatekeeper() -> AsyncIterator[Served]:
    key = generate_private_key()
    tokens = GatekeeperTokens(key, 60)
    catalog = ScriptedCatalog(
        properties={
            OWN: {EXECUTION_ID: "ex-1"},
            "source": {},
            result_table("ex-1", "x"): {EXECUTION_ID: "EX_1"},
        }
    )
    store = Standing()
    async with served(catalog.application()) as upstream:
        client = CatalogClient(f"{upstream}/management", upstream, "")
        await client.open()
        try:
            app = Gatekeeper(tokens, store, client).application()
            async with served(app) as base:
                yield Served(base, tokens.issue(GRANT)[0], catalog, store)
        finally:
            await client.close()


def _table(name: str) -> str:
    return f"{WAREHOUSE}/namespaces/results/tables/{name}"


async def test_the_config_names_the_warehouse_as_the_gatekeeper_does(gatekeeper: Served) -> None:
    status, body = await gatekeeper.call("GET", "config", params={"warehouse": WAREHOUSE})
    assert (status, body["overrides"]["prefix"]) == (200, WAREHOUSE)
    status, _ = await gatekeeper.call("GET", "config", params={"warehouse": str(uuid.uuid4())})
    assert status == 403


async def test_its_own_table_and_its_sources_are_forwarded_to_the_catalog(
    gatekeeper: Served,
) -> None:
    assert (await gatekeeper.call("GET", _table(OWN)))[0] == 200
    assert (await gatekeeper.call("GET", _table("source")))[0] == 200
    assert gatekeeper.catalog.seen == [("GET", OWN), ("GET", "source")]


async def test_a_table_named_as_its_own_but_anothers_is_not_found(gatekeeper: Served) -> None:
    status, body = await gatekeeper.call("GET", _table(result_table("ex-1", "x")))
    assert (status, body["error"]["type"]) == (404, "NoSuchTableException")


async def test_other_tables_never_reach_the_catalog(gatekeeper: Served) -> None:
    for method, name in (("GET", "other"), ("POST", "source"), ("DELETE", "source")):
        status, _ = await gatekeeper.call(method, _table(name), json={"updates": []})
        assert status == 404, (method, name)
    assert gatekeeper.catalog.seen == []


async def test_an_ended_or_unbound_execution_writes_nothing(gatekeeper: Served) -> None:
    for state in ("SUCCEEDED", None):
        gatekeeper.store.state = state
        status, _ = await gatekeeper.call("DELETE", _table(OWN))
        assert status == 403, state
    # Its sources stay readable until its token expires: reading needs no bound execution.
    assert (await gatekeeper.call("GET", _table("source")))[0] == 200
    assert ("DELETE", OWN) not in gatekeeper.catalog.seen


async def test_a_refused_registry_token_is_replaced_once(gatekeeper: Served) -> None:
    gatekeeper.catalog.refusals = 1
    assert (await gatekeeper.call("GET", _table(OWN)))[0] == 200
    gatekeeper.catalog.refusals = 2
    assert (await gatekeeper.call("GET", _table("source")))[0] == 401


async def test_only_its_tokens_are_taken(gatekeeper: Served) -> None:
    other = GatekeeperTokens(generate_private_key(), 60).issue(GRANT)[0]
    for token in (other, "", "not-a-token"):
        status, body = await gatekeeper.call("GET", _table(OWN), token=token)
        assert (status, body["error"]["type"]) == (401, "NotAuthorizedException")
