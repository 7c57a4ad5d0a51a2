"""The development catalog's answer to what fails inside it: the Iceberg REST error body, naming
the kind of failure (its database's as Lakekeeper does) without its details."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import sqlalchemy.exc
from aiohttp import web

from embedded_stack.dev_catalog.app import answer_errors
from tests.loopback_http import served


class OperationalError(Exception):
    """Stands for the database driver's error of that name (psycopg2's)."""


DATABASE_DOWN = sqlalchemy.exc.OperationalError(
    "SELECT credential FROM dev_catalog_warehouses WHERE id = %(id)s",
    {"id": "hunter2"},
    OperationalError('connection to server at "10.1.2.3", port 5432 failed'),
)


async def _answer(failure: Exception) -> tuple[int, dict[str, Any]]:
    async def failing(request: web.Request) -> web.Response:
        raise failure

    app = web.Application(middlewares=[answer_errors])
    app.router.add_get("/catalog/v1/config", failing)
    async with (
        served(app) as base,
        aiohttp.ClientSession() as session,
        session.get(f"{base}/catalog/v1/config") as response,
    ):
        return response.status, await response.json()


@pytest.mark.parametrize(
    ("failure", "error_type", "cause"),
    [
        (DATABASE_DOWN, "DatabaseError", "OperationalError"),
        (KeyError("storage-profile"), "InternalServerError", "KeyError"),
    ],
)
async def test_an_unexpected_failure_names_its_kind_and_nothing_more(
    failure: Exception, error_type: str, cause: str
) -> None:
    status, body = await _answer(failure)
    assert status == 500
    error = body["error"]
    assert (error["type"], error["code"]) == (error_type, 500)
    assert f"({cause})" in error["message"]
    for detail in ("10.1.2.3", "hunter2", "SELECT", "storage-profile"):
        assert detail not in error["message"]
