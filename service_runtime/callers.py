"""Which kind of caller a method accepts: a user, a service of the mesh, a computing unit
(acting as itself, or for the user it serves), or an execution's own token."""

from __future__ import annotations

import grpc

from service_runtime.auth import ON_BEHALF_KEY, Identity
from service_runtime.context import current_identity
from service_runtime.errors import ServiceError


def _denied(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.PERMISSION_DENIED, message)


def require_user() -> Identity:
    """The user calling directly (through the gateway); PERMISSION_DENIED for any other
    caller, a computing unit acting for a user included."""
    identity = current_identity()
    if not identity.is_user or identity.via is not None:
        raise _denied("this method needs a user's token")
    return identity


def require_service() -> Identity:
    """The calling service of the mesh; PERMISSION_DENIED for anyone else."""
    identity = current_identity()
    if not identity.is_service:
        raise _denied("this method is for services of the mesh only")
    return identity


def require_unit() -> Identity:
    """The calling computing unit, acting as itself or for a user; PERMISSION_DENIED for
    anyone else (users' tokens included)."""
    identity = current_identity()
    unit = identity if identity.is_unit else identity.via
    if unit is None or not unit.is_unit:
        raise _denied("this method is for computing units only, with their unit credential")
    return unit


def acting_for() -> Identity:
    """The user whose rights a call uses: the user calling, or the one a computing unit acts
    for (named in ``x-texera-on-behalf-of``); PERMISSION_DENIED for a unit or service alone."""
    identity = current_identity()
    if not identity.is_user:
        raise _denied(
            f"this method needs a user, or the user the caller acts for in {ON_BEHALF_KEY}"
        )
    return identity


def require_execution() -> Identity:
    """The execution whose own token the call carries; PERMISSION_DENIED for anyone else."""
    identity = current_identity()
    if not identity.is_execution:
        raise _denied("this method takes an execution's token only")
    return identity
