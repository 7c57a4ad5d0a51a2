"""``python -m warehouse_service.bootstrap_catalog`` (docker-compose.yml's lakekeeper-bootstrap)
as a process, against a catalog on loopback that answers its bootstrap as Lakekeeper does."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.loopback_http import served

pytestmark = pytest.mark.integration

CLIENT_SECRET = "registry-secret-" + "x" * 16


class Lakekeeper:
    """Issues one token to the registry's client and answers bootstraps from `answers`."""

    def __init__(self) -> None:
        self.answers: list[web.Response] = []
        self.bootstraps: list[tuple[str, dict[str, object]]] = []

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "client_credentials" or not request.headers.get(
            "Authorization", ""
        ).startswith("Basic "):
            return web.json_response({"error": "invalid_client"}, status=401)
        return web.json_response({"access_token": "registry-token", "expires_in": 300})

    async def bootstrap(self, request: web.Request) -> web.Response:
        self.bootstraps.append((request.headers.get("Authorization", ""), await request.json()))
        return self.answers.pop(0)


@pytest.fixture
async def lakekeeper() -> AsyncIterator[tuple[Lakekeeper, str]]:
    catalog = Lakekeeper()
    app = web.Application()
    app.router.add_post("/token", catalog.token)
    app.router.add_post("/management/v1/bootstrap", catalog.bootstrap)
    async with served(app) as base:
        yield catalog, base


async def _run(base: str, tmp_path: Path) -> tuple[int, str]:
    secret = tmp_path / "catalog_client_secret"
    secret.write_text(CLIENT_SECRET)
    secret.chmod(0o600)
    env = {
        "TEXERA_LAKE_CATALOG_MANAGEMENT_URI": f"{base}/management",
        "TEXERA_LAKE_CATALOG_TOKEN_URI": f"{base}/token",
        "TEXERA_LAKE_CATALOG_CLIENT_SECRET_FILE": str(secret),
        "TEXERA_LAKE_WAREHOUSE_CATALOG_ATTEMPTS": "1",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "warehouse_service.bootstrap_catalog",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


async def test_bootstraps_as_the_registry_and_a_repeat_succeeds(
    lakekeeper: tuple[Lakekeeper, str], tmp_path: Path
) -> None:
    catalog, base = lakekeeper
    already = {"error": {"code": 400, "type": "CatalogAlreadyBootstrapped", "message": "done"}}
    catalog.answers = [web.Response(status=204), web.json_response(already, status=400)]
    first, first_log = await _run(base, tmp_path)
    again, again_log = await _run(base, tmp_path)
    assert (first, again) == (0, 0), first_log + again_log
    assert "catalog bootstrapped" in first_log
    assert "bootstrapped already" in again_log
    (token, body), _ = catalog.bootstraps
    assert token == "Bearer registry-token"
    assert body["is-operator"] is True
    assert CLIENT_SECRET not in first_log + again_log


async def test_a_refused_bootstrap_fails_the_command(
    lakekeeper: tuple[Lakekeeper, str], tmp_path: Path
) -> None:
    catalog, base = lakekeeper
    refused = {"error": {"code": 403, "type": "Forbidden", "message": "not an admin"}}
    catalog.answers = [web.json_response(refused, status=403)]
    code, log = await _run(base, tmp_path)
    assert code == 1
    assert "Forbidden" in log
