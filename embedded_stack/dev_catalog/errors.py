"""Errors in the Iceberg REST error shape: ``{"error": {"message", "type", "code"}}``."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web


class CatalogError(Exception):
    """An error answered to the client with an HTTP status, a type and a message."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        return error_response(self.status, self.error_type, self.message, self.headers)


def error_response(
    status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": error_type, "code": status}}
    return web.json_response(body, status=status, headers=headers)


def bad_request(error_type: str, message: str) -> CatalogError:
    return CatalogError(400, error_type, message)


def not_found(error_type: str, message: str) -> CatalogError:
    return CatalogError(404, error_type, message)


def conflict(error_type: str, message: str) -> CatalogError:
    return CatalogError(409, error_type, message)


def unauthorized(message: str, *, token_presented: bool) -> CatalogError:
    """401 with the challenge RFC 6750 asks for."""
    challenge = 'Bearer error="invalid_token"' if token_presented else "Bearer"
    return CatalogError(401, "NotAuthorizedException", message, {"WWW-Authenticate": challenge})


def forbidden(message: str) -> CatalogError:
    return CatalogError(403, "ForbiddenException", message)
