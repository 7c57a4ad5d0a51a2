"""The registry's catalog client against a scripted catalog on loopback: tokens, retries,
refusals and error bodies that are not JSON."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest
from aiohttp import web

from tests.loopback_http import served
from warehouse_service.api.catalog_errors import catalog_failure
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.catalog_oauth import TOKEN_EXCHANGE, OAuthClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.settings import WAREHOUSE_SCOPE

LISTING = {"warehouses": [{"name": "w", "id": "1"}]}


@dataclass
class ScriptedCatalog:
    """Answers management calls from a script (then 200 with LISTING), and issues token-1,
    token-2, ... living `lifetime` seconds."""

    script: list[web.Response] = field(default_factory=list)
    lifetime: float = 3600
    token_forms: list[dict[str, str]] = field(default_factory=list)
    seen_tokens: list[str] = field(default_factory=list)
    refuse_client: bool = False
    refuse_exchange: str = ""
    bootstraps: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    bootstrap_answers: list[web.Response] = field(default_factory=list)

    async def token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_forms.append(form)
        if self.refuse_client:
            body = {"error": "invalid_client", "error_description": "unknown client"}
            return web.json_response(body, status=401)
        if form["grant_type"] == TOKEN_EXCHANGE and self.refuse_exchange:
            body = {"error": self.refuse_exchange, "error_description": "no"}
            return web.json_response(body, status=400)
        token = f"token-{len(self.token_forms)}"
        return web.json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime}
        )

    async def bootstrap(self, request: web.Request) -> web.Response:
        self.bootstraps.append((request.headers.get("Authorization", ""), await request.json()))
        return self.bootstrap_answers.pop(0)

    async def listing(self, request: web.Request) -> web.Response:
        self.seen_tokens.append(request.headers.get("Authorization", ""))
        if self.script:
            return self.script.pop(0)
        return web.json_response(LISTING)


@pytest.fixture
async def catalog() -> AsyncIterator[tuple[ScriptedCatalog, str]]:
    scripted = ScriptedCatalog()
    app = web.Application()
    app.router.add_post("/oauth2/token", scripted.token)
    app.router.add_get("/management/v1/warehouse", scripted.listing)
    app.router.add_post("/management/v1/bootstrap", scripted.bootstrap)
    async with served(app) as base:
        yield scripted, base


async def client_of(
    base: str, *, authenticated: bool = True, warehouse_scope: str = WAREHOUSE_SCOPE
) -> CatalogClient:
    oauth = OAuthClient(
        f"{base}/oauth2/token",
        "registry",
        "s" * 32,
        scope="lakekeeper",
        audience="",
        warehouse_scope=warehouse_scope,
    )
    client = CatalogClient(
        f"{base}/management",
        f"{base}/catalog",
        "project",
        attempts=3,
        backoff_seconds=0.01,
        oauth=oauth if authenticated else None,
    )
    await client.open()
    return client


def error_page(status: int, body: str, content_type: str) -> web.Response:
    return web.Response(status=status, text=body, content_type=content_type)


async def test_a_502_html_page_is_retried_like_any_5xx(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    scripted.script = [error_page(502, "<html><h1>502 Bad Gateway</h1></html>", "text/html")]
    client = await client_of(base)
    try:
        assert await client.find_warehouse("w") == LISTING["warehouses"][0]
    finally:
        await client.close()
    assert len(scripted.seen_tokens) == 2


async def test_throttling_and_request_timeouts_are_retried(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    scripted.script = [
        web.json_response({"error": {"type": "SlowDown"}}, status=429),
        web.json_response({"error": {"type": "RequestTimeout"}}, status=408),
    ]
    client = await client_of(base)
    try:
        assert await client.find_warehouse("w") == LISTING["warehouses"][0]
    finally:
        await client.close()
    assert len(scripted.seen_tokens) == 3


async def test_a_503_text_that_persists_is_unavailable(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    scripted.script = [error_page(503, "upstream connect error", "text/plain") for _ in range(3)]
    client = await client_of(base)
    try:
        with pytest.raises(CatalogUnavailable, match="HTTP 503"):
            await client.find_warehouse("w")
    finally:
        await client.close()
    assert len(scripted.seen_tokens) == 3


async def test_the_token_is_sent_and_reused(catalog: tuple[ScriptedCatalog, str]) -> None:
    scripted, base = catalog
    client = await client_of(base)
    try:
        await client.find_warehouse("w")
        await client.find_warehouse("w")
    finally:
        await client.close()
    assert scripted.seen_tokens == ["Bearer token-1", "Bearer token-1"]
    [form] = scripted.token_forms
    assert (form["grant_type"], form["scope"]) == ("client_credentials", "lakekeeper")


async def test_a_token_is_replaced_before_it_expires(catalog: tuple[ScriptedCatalog, str]) -> None:
    scripted, base = catalog
    scripted.lifetime = 1.0  # replaced a quarter of its life before expiry
    client = await client_of(base)
    try:
        await client.find_warehouse("w")
        await asyncio.sleep(0.8)
        await client.find_warehouse("w")
    finally:
        await client.close()
    assert scripted.seen_tokens == ["Bearer token-1", "Bearer token-2"]


async def test_a_401_is_retried_once_with_a_fresh_token(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    refused = {"error": {"message": "expired", "type": "NotAuthorizedException", "code": 401}}
    scripted.script = [web.json_response(refused, status=401)]
    client = await client_of(base)
    try:
        assert await client.find_warehouse("w") == LISTING["warehouses"][0]
    finally:
        await client.close()
    assert scripted.seen_tokens == ["Bearer token-1", "Bearer token-2"]


async def test_a_401_that_persists_is_an_operator_problem(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    refused = {"error": {"message": "bad token", "type": "NotAuthorizedException", "code": 401}}
    scripted.script = [web.json_response(refused, status=401) for _ in range(2)]
    client = await client_of(base)
    try:
        with pytest.raises(CatalogError) as error:
            await client.find_warehouse("w")
    finally:
        await client.close()
    assert len(scripted.seen_tokens) == 2
    answer = catalog_failure(error.value)
    assert (answer.code, answer.reason) == (grpc.StatusCode.UNAVAILABLE, "CATALOG_UNAUTHORIZED")
    assert answer.metadata["catalog_error"] == "NotAuthorizedException"


async def test_a_403_is_permission_denied_without_retry(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    refused = {"error": {"message": "not yours", "type": "ForbiddenException", "code": 403}}
    scripted.script = [web.json_response(refused, status=403)]
    client = await client_of(base)
    try:
        with pytest.raises(CatalogError) as error:
            await client.find_warehouse("w")
    finally:
        await client.close()
    assert len(scripted.seen_tokens) == 1
    answer = catalog_failure(error.value)
    assert (answer.code, answer.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CATALOG_FORBIDDEN")
    assert "not yours" in answer.message


async def test_an_unknown_client_is_unauthorized(catalog: tuple[ScriptedCatalog, str]) -> None:
    scripted, base = catalog
    scripted.refuse_client = True
    client = await client_of(base)
    try:
        with pytest.raises(CatalogError) as error:
            await client.find_warehouse("w")
    finally:
        await client.close()
    assert (error.value.status, error.value.error_type) == (401, "invalid_client")
    assert scripted.seen_tokens == []


async def test_warehouse_tokens_are_exchanged_for_the_registrys_and_shared(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    client = await client_of(base)
    try:
        first = await client.warehouse_token("wh-1", write=True)
        again = await client.warehouse_token("wh-1", write=True)
        reader = await client.warehouse_token("wh-1", write=False)
    finally:
        await client.close()
    assert first is not None
    assert reader is not None
    assert again is first
    assert (first.token, reader.token) == ("token-2", "token-3")
    _own, exchange, read_exchange = scripted.token_forms
    assert exchange["grant_type"] == TOKEN_EXCHANGE
    assert exchange["subject_token"] == "token-1"
    assert (exchange["scope"], read_exchange["scope"]) == (
        "warehouse:wh-1:write",
        "warehouse:wh-1:read",
    )


async def test_a_fixed_warehouse_scope_is_asked_for_every_warehouse(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    # As for Keycloak, which exchanges tokens only for the scopes it knows.
    scripted, base = catalog
    client = await client_of(base, warehouse_scope="lakekeeper")
    try:
        first = await client.warehouse_token("wh-1", write=True)
        other = await client.warehouse_token("wh-2", write=False)
    finally:
        await client.close()
    assert first is other
    _own, exchange = scripted.token_forms
    assert (exchange["grant_type"], exchange["scope"]) == (TOKEN_EXCHANGE, "lakekeeper")


async def test_bootstrap_makes_the_registry_the_operator_and_a_repeat_is_no_error(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    already = {"error": {"code": 400, "type": "CatalogAlreadyBootstrapped", "message": "done"}}
    scripted.bootstrap_answers = [web.Response(status=204), web.json_response(already, status=400)]
    client = await client_of(base)
    try:
        assert await client.bootstrap() is True
        assert await client.bootstrap() is False
    finally:
        await client.close()
    (token, body), _again = scripted.bootstraps
    assert token == "Bearer token-1"
    assert body["accept-terms-of-use"] is True
    assert body["is-operator"] is True


async def test_a_refused_bootstrap_is_a_catalog_error(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    refused = {"error": {"code": 403, "type": "Forbidden", "message": "not you"}}
    scripted.bootstrap_answers = [web.json_response(refused, status=403)]
    client = await client_of(base)
    try:
        with pytest.raises(CatalogError) as error:
            await client.bootstrap()
    finally:
        await client.close()
    assert (error.value.status, error.value.error_type) == (403, "Forbidden")


async def test_a_refused_exchange_is_permission_denied(
    catalog: tuple[ScriptedCatalog, str],
) -> None:
    scripted, base = catalog
    scripted.refuse_exchange = "invalid_scope"
    client = await client_of(base)
    try:
        with pytest.raises(CatalogError) as error:
            await client.warehouse_token("wh-1", write=True)
    finally:
        await client.close()
    assert catalog_failure(error.value).code == grpc.StatusCode.PERMISSION_DENIED


async def test_without_oauth_no_token_is_sent(catalog: tuple[ScriptedCatalog, str]) -> None:
    scripted, base = catalog
    client = await client_of(base, authenticated=False)
    try:
        await client.find_warehouse("w")
        assert await client.warehouse_token("wh-1", write=True) is None
    finally:
        await client.close()
    assert scripted.seen_tokens == [""]
    assert scripted.token_forms == []
