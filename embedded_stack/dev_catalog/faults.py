"""Fault injection for tests: one warehouse's answers made slow or failing at run time.

Off unless the catalog runs with fault injection enabled; then
``PUT /dev/v1/warehouse/{id}/fault`` with ``{"delay-seconds": 2.5, "fail-status": 503}``
affects every catalog and management request about that warehouse, and
``DELETE`` on the same path clears it. Other warehouses are never touched. A
failure's error body says ``InjectedFault`` unless ``fail-type`` and
``fail-message`` say what a real catalog would (``DatabaseError``, say).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from embedded_stack.dev_catalog.errors import bad_request, error_response


@dataclass(frozen=True)
class Fault:
    delay_seconds: float = 0.0
    fail_status: int | None = None
    fail_type: str = "InjectedFault"
    fail_message: str = ""


class Faults:
    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}

    async def apply(self, warehouse_id: str) -> web.Response | None:
        """Waits the warehouse's delay; returns the failure response if it should fail."""
        fault = self._faults.get(warehouse_id)
        if fault is None:
            return None
        if fault.delay_seconds:
            await asyncio.sleep(fault.delay_seconds)
        if fault.fail_status is not None:
            message = fault.fail_message or f"injected failure for warehouse {warehouse_id}"
            return error_response(fault.fail_status, fault.fail_type, message)
        return None

    async def put(self, request: web.Request) -> web.Response:
        body = await request.json()
        delay = body.get("delay-seconds", 0.0)
        status = body.get("fail-status")
        if not isinstance(delay, int | float) or delay < 0:
            raise bad_request("BadRequestException", "delay-seconds must be a number >= 0")
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise bad_request("BadRequestException", "fail-status must be an HTTP error status")
        error_type = body.get("fail-type", Fault.fail_type)
        message = body.get("fail-message", "")
        if not isinstance(error_type, str) or not error_type or not isinstance(message, str):
            raise bad_request("BadRequestException", "fail-type and fail-message must be text")
        self._faults[request.match_info["warehouse_id"]] = Fault(
            float(delay), status, error_type, message
        )
        return web.Response(status=204)

    async def clear(self, request: web.Request) -> web.Response:
        self._faults.pop(request.match_info["warehouse_id"], None)
        return web.Response(status=204)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.put("/dev/v1/warehouse/{warehouse_id}/fault", self.put),
            web.delete("/dev/v1/warehouse/{warehouse_id}/fault", self.clear),
        ]
