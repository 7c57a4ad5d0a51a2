"""Iceberg REST's ErrorModel, for the HTTP endpoints of the mesh that speak that API."""

from __future__ import annotations

from aiohttp import web


def iceberg_error(status: int, kind: str, message: str) -> web.Response:
    """An ErrorModel response: status, the error's type (``ForbiddenException``, ...) and
    message."""
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )
