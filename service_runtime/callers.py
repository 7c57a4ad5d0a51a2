"""Which kind of caller a method accepts: an end user, or a service of the mesh."""

from __future__ import annotations

import grpc

from service_runtime.auth import Identity
from service_runtime.context import current_identity
from service_runtime.errors import ServiceError


def require_user() -> Identity:
    """The calling user; PERMISSION_DENIED for a service token."""
    identity = current_identity()
    if identity.is_service:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            "this method needs an end user's token, not a service token",
        )
    return identity


def require_service() -> Identity:
    """The calling service; PERMISSION_DENIED for an end user's token."""
    identity = current_identity()
    if not identity.is_service:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED, "this method is for services of the mesh only"
        )
    return identity
