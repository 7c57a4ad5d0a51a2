"""What a user may do on a warehouse: nothing, read, write or own it.

Every path of the registry asks here, with the warehouse's row and the user's
grant as the database holds them at this call (grants are never cached, so a
revocation applies to the next call). A user with no role learns nothing: the
warehouse is NOT_FOUND, as if it did not exist. A member whose role is too
small gets PERMISSION_DENIED with ErrorInfo reason WAREHOUSE_ROLE_INSUFFICIENT.
"""

from __future__ import annotations

import enum

import grpc

from service_runtime.errors import Resource, ServiceError, not_found
from texera.lake.v1 import warehouse_pb2

#: ErrorInfo reason of a member whose role does not allow what it asked.
ROLE_INSUFFICIENT = "WAREHOUSE_ROLE_INSUFFICIENT"


class Role(enum.IntEnum):
    """Each role allows what the smaller ones do."""

    NONE = 0
    READER = 1
    WRITER = 2
    OWNER = 3

    @property
    def proto(self) -> warehouse_pb2.WarehouseRole.ValueType:
        return _PROTO[self]


_PROTO = {
    Role.NONE: warehouse_pb2.WAREHOUSE_ROLE_UNSPECIFIED,
    Role.READER: warehouse_pb2.WAREHOUSE_ROLE_READER,
    Role.WRITER: warehouse_pb2.WAREHOUSE_ROLE_WRITER,
    Role.OWNER: warehouse_pb2.WAREHOUSE_ROLE_OWNER,
}
#: The roles an owner may grant, as the API names them.
GRANTABLE = {
    warehouse_pb2.WAREHOUSE_ROLE_READER: Role.READER,
    warehouse_pb2.WAREHOUSE_ROLE_WRITER: Role.WRITER,
}


def role_of(user_id: str, owner_user_id: str, granted: str | None) -> Role:
    """The user's role on a warehouse of owner_user_id, given the role granted to the user
    ('READER', 'WRITER', or None without a grant)."""
    if user_id == owner_user_id:
        return Role.OWNER
    return Role[granted] if granted else Role.NONE


def require(role: Role, needed: Role, warehouse_id: str) -> None:
    """Nothing when role allows what needs `needed`; else NOT_FOUND for a user without any
    role, PERMISSION_DENIED for a member whose role is too small."""
    if role >= needed:
        return
    if role is Role.NONE:
        raise not_found(Resource.WAREHOUSE, warehouse_id)
    raise ServiceError(
        grpc.StatusCode.PERMISSION_DENIED,
        f"warehouse {warehouse_id} is shared with you as {role.name.lower()}; "
        f"this needs {needed.name.lower()}",
        reason=ROLE_INSUFFICIENT,
        metadata={"role": role.name, "required_role": needed.name},
    )
