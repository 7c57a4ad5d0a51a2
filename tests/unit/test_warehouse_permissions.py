"""Who may do what on a warehouse, and how a share request is checked."""

from __future__ import annotations

import grpc
import pytest

from service_runtime.errors import FieldViolations, ServiceError
from texera.lake.v1 import warehouse_pb2
from warehouse_service.api.validation import check_member
from warehouse_service.domain.permissions import ROLE_INSUFFICIENT, Role, require, role_of

WAREHOUSE = "6f1c0a52-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("user", "granted", "role"),
    [
        ("alice", None, Role.OWNER),
        # The owner stays owner whatever a stray grant row says.
        ("alice", "READER", Role.OWNER),
        ("bob", "READER", Role.READER),
        ("bob", "WRITER", Role.WRITER),
        ("bob", None, Role.NONE),
    ],
)
def test_role_of_a_user(user: str, granted: str | None, role: Role) -> None:
    assert role_of(user, "alice", granted) is role


def test_roles_include_the_smaller_ones() -> None:
    assert Role.NONE < Role.READER < Role.WRITER < Role.OWNER
    for role in Role:
        require(role, Role.NONE, WAREHOUSE)  # nothing needed: nothing raised


@pytest.mark.parametrize("needed", [Role.READER, Role.WRITER, Role.OWNER])
def test_a_user_without_a_role_learns_nothing(needed: Role) -> None:
    with pytest.raises(ServiceError) as raised:
        require(Role.NONE, needed, WAREHOUSE)
    assert raised.value.code == grpc.StatusCode.NOT_FOUND
    assert raised.value.reason == "WAREHOUSE_NOT_FOUND"


@pytest.mark.parametrize(
    ("role", "needed"),
    [(Role.READER, Role.WRITER), (Role.READER, Role.OWNER), (Role.WRITER, Role.OWNER)],
)
def test_a_member_with_too_small_a_role_is_denied(role: Role, needed: Role) -> None:
    with pytest.raises(ServiceError) as raised:
        require(role, needed, WAREHOUSE)
    error = raised.value
    assert error.code == grpc.StatusCode.PERMISSION_DENIED
    assert error.reason == ROLE_INSUFFICIENT
    assert error.metadata == {"role": role.name, "required_role": needed.name}


@pytest.mark.parametrize(
    ("role", "needed"),
    [(Role.READER, Role.READER), (Role.WRITER, Role.READER), (Role.OWNER, Role.WRITER)],
)
def test_a_large_enough_role_passes(role: Role, needed: Role) -> None:
    require(role, needed, WAREHOUSE)


def test_roles_show_as_the_api_names_them() -> None:
    assert Role.OWNER.proto == warehouse_pb2.WAREHOUSE_ROLE_OWNER
    assert Role.WRITER.proto == warehouse_pb2.WAREHOUSE_ROLE_WRITER
    assert Role.READER.proto == warehouse_pb2.WAREHOUSE_ROLE_READER
    assert Role.NONE.proto == warehouse_pb2.WAREHOUSE_ROLE_UNSPECIFIED


def _violations(member: warehouse_pb2.WarehouseMember) -> set[str]:
    violations = FieldViolations()
    check_member(violations, member, "member")
    with pytest.raises(ServiceError) as raised:
        violations.raise_if_any()
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return {violation.field for violation in raised.value.violations}


@pytest.mark.parametrize(
    "role", [warehouse_pb2.WAREHOUSE_ROLE_READER, warehouse_pb2.WAREHOUSE_ROLE_WRITER]
)
def test_readers_and_writers_may_be_granted(role: warehouse_pb2.WarehouseRole.ValueType) -> None:
    violations = FieldViolations()
    check_member(violations, warehouse_pb2.WarehouseMember(user_id="bob", role=role), "member")
    violations.raise_if_any()


@pytest.mark.parametrize(
    "role",
    [
        warehouse_pb2.WAREHOUSE_ROLE_UNSPECIFIED,
        warehouse_pb2.WAREHOUSE_ROLE_OWNER,
        42,  # a number no role has
    ],
)
def test_no_other_role_may_be_granted(role: int) -> None:
    member = warehouse_pb2.WarehouseMember(user_id="bob", role=role)  # type: ignore[arg-type]
    assert _violations(member) == {"member.role"}


@pytest.mark.parametrize("user_id", ["", "x" * 129, "bob\n"])
def test_the_user_must_be_named(user_id: str) -> None:
    member = warehouse_pb2.WarehouseMember(
        user_id=user_id, role=warehouse_pb2.WAREHOUSE_ROLE_READER
    )
    assert _violations(member) == {"member.user_id"}
