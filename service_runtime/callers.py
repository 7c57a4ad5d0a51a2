"""Which kind of caller a method accepts: a user, a service of the mesh, or a computing unit."""

from __future__ import annotations

import grpc

from service_runtime.auth import Identity
from service_runtime.context import current_identity
from service_runtime.errors import ServiceError


def require_user() -> Identity:
    """The calling user (directly, or through a computing unit acting for them);
    PERMISSION_DENIED for any other caller."""
    identity = current_identity()
    if not identity.is_user:
        raise ServiceError(grpc.StatusCode.PERMISSION_DENIED, "this method needs a user's token")
    return identity


def require_service() -> Identity:
    """The calling service of the mesh; PERMISSION_DENIED for anyone else."""
    identity = current_identity()
    if not identity.is_service:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED, "this method is for services of the mesh only"
        )
    return identity


def require_unit() -> Identity:
    """The calling computing unit, acting as itself or for a user; PERMISSION_DENIED for
    anyone else (users' tokens included)."""
    identity = current_identity()
    unit = identity if identity.is_unit else identity.via
    if unit is None or not unit.is_unit:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED, "this method is for computing units only"
        )
    return unit
