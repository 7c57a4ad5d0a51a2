"""What the catalog's request handlers share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from embedded_stack.dev_catalog.catalogs import WarehouseCatalogs
from embedded_stack.dev_catalog.crypto import CredentialCipher
from embedded_stack.dev_catalog.errors import CatalogError, bad_request
from embedded_stack.dev_catalog.faults import Faults
from embedded_stack.dev_catalog.store import (
    DEFAULT_PROJECT,
    CatalogStore,
    WarehouseRecord,
    check_project,
)
from service_runtime.endpoint_guard import EndpointGuard

T = TypeVar("T")


class InjectedFailure(Exception):
    """Carries an injected failure's response out of a handler."""

    def __init__(self, response: web.Response) -> None:
        super().__init__("injected failure")
        self.response = response


@dataclass
class CatalogState:
    store: CatalogStore
    catalogs: WarehouseCatalogs
    cipher: CredentialCipher
    faults: Faults
    guard: EndpointGuard

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """Runs blocking work (database, storage) off the event loop."""
        return await asyncio.to_thread(_no_stop_iteration, function, *args)

    async def warehouse(self, warehouse_id: str, *, active: bool = False) -> WarehouseRecord:
        """The warehouse, after any injected fault; with active=True an inactive one is refused."""
        failure = await self.faults.apply(warehouse_id)
        if failure is not None:
            raise InjectedFailure(failure)
        record = await self.run(self.store.get, warehouse_id)
        if active and record.status != "active":
            raise CatalogError(404, "WarehouseInactive", f"Warehouse {record.name} is inactive")
        return record


def _no_stop_iteration(function: Callable[..., T], *args: Any) -> T:
    """function(*args); a StopIteration escaping it would never resolve the awaiting future."""
    try:
        return function(*args)
    except StopIteration as exc:
        raise RuntimeError("a blocking call raised StopIteration") from exc


def project_of(request: web.Request, explicit: str | None = None) -> str:
    """The project a request is about: explicit (a deprecated body or query field),
    else the x-project-id header, else the default project."""
    return check_project(explicit or request.headers.get("x-project-id") or DEFAULT_PROJECT)


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise bad_request("BadRequestException", "the request body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise bad_request("BadRequestException", "the request body must be a JSON object")
    return body
