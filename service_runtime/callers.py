"""Which kind of caller a method accepts: an end user, a service of the mesh, or a
computing unit acting as itself (and the user it acts for)."""

from __future__ import annotations

import grpc

from service_runtime.auth import ON_BEHALF_KEY, Identity
from service_runtime.context import current_identity, on_behalf_var
from service_runtime.errors import ServiceError


def _denied(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.PERMISSION_DENIED, message)


def require_user() -> Identity:
    """The calling user; PERMISSION_DENIED for a service's or a unit's token."""
    identity = current_identity()
    if not identity.is_user:
        raise _denied("this method needs an end user's token, not a service's or a unit's")
    return identity


def require_service() -> Identity:
    """The calling service; PERMISSION_DENIED for any other token."""
    identity = current_identity()
    if not identity.is_service:
        raise _denied("this method is for services of the mesh only")
    return identity


def require_unit() -> Identity:
    """The calling computing unit (its id is the identity's user_id); PERMISSION_DENIED for
    any other token."""
    identity = current_identity()
    if not identity.is_unit:
        raise _denied("this method is for computing units only, with their unit credential")
    return identity


def require_internal() -> Identity:
    """A calling service or unit; PERMISSION_DENIED for a user's token."""
    identity = current_identity()
    if identity.is_user:
        raise _denied("this method is internal to the mesh and refuses users' tokens")
    return identity


def acting_for() -> Identity:
    """The user a service or unit acts for, from its verified ``x-texera-on-behalf-of``."""
    user = on_behalf_var.get()
    if user is None or not user.is_user:
        raise _denied(f"this method needs the user the caller acts for, in {ON_BEHALF_KEY}")
    return user
