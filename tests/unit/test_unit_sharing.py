"""ShareComputingUnit and UnshareComputingUnit check both identifiers before anything else: a
malformed one is INVALID_ARGUMENT naming every bad field (as ShareWarehouse names
`member.user_id`), never a lookup in the database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from service_runtime.auth import USER_ROLE, Identity
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from texera.lake.v1 import computing_unit_service_pb2 as cus
from warehouse_service.api.computing_units import ComputingUnitServicer

UNIT = "cu-0123456789abcdef"


class _NoDatabase:
    """Fails the test if the servicer reaches the database with a malformed request."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the database was used ({name}) for a malformed request")


@pytest.fixture
def servicer() -> Iterator[ComputingUnitServicer]:
    token = identity_var.set(Identity(user_id="alice", role=USER_ROLE, token="t"))
    try:
        yield ComputingUnitServicer(_NoDatabase(), None, "page-token-key")  # type: ignore[arg-type]
    finally:
        identity_var.reset(token)


async def _refused(
    servicer: ComputingUnitServicer, unit_id: str, user_id: str, share: bool
) -> ServiceError:
    call = (
        servicer.ShareComputingUnit(
            cus.ShareComputingUnitRequest(computing_unit_id=unit_id, user_id=user_id), None
        )
        if share
        else servicer.UnshareComputingUnit(
            cus.UnshareComputingUnitRequest(computing_unit_id=unit_id, user_id=user_id), None
        )
    )
    with pytest.raises(ServiceError) as raised:
        await call
    return raised.value


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("user_id", ["", "x" * 129, "bob\n", "bob\x00", "\x7f"])
async def test_a_malformed_user_id_is_refused(
    servicer: ComputingUnitServicer, share: bool, user_id: str
) -> None:
    error = await _refused(servicer, UNIT, user_id, share)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == ["user_id"]
    assert "user_id" in error.message


@pytest.mark.parametrize("share", [True, False])
async def test_every_bad_identifier_is_named_at_once(
    servicer: ComputingUnitServicer, share: bool
) -> None:
    error = await _refused(servicer, "not a unit!", "", share)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(v.field for v in error.violations) == ["computing_unit_id", "user_id"]
