"""ServiceError carries the canonical code and google.rpc.Status details."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from service_runtime.errors import ERROR_DOMAIN, FieldViolations, Resource, ServiceError, not_found


def _details(error: ServiceError) -> status_pb2.Status:
    trailer = dict(error.to_status().trailing_metadata)["grpc-status-details-bin"]
    return status_pb2.Status.FromString(trailer)


def test_field_violations_name_every_bad_field() -> None:
    violations = FieldViolations()
    violations.check(False, "warehouse.storage.bucket", "must be 3 to 63 characters")
    violations.check(True, "warehouse.display_name", "is fine")
    violations.check(False, "warehouse.storage.region", "is required")
    with pytest.raises(ServiceError) as raised:
        violations.raise_if_any()
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "warehouse.storage.bucket" in error.message
    assert "warehouse.storage.region" in error.message
    bad_request = error_details_pb2.BadRequest()
    assert _details(error).details[0].Unpack(bad_request)
    assert [v.field for v in bad_request.field_violations] == [
        "warehouse.storage.bucket",
        "warehouse.storage.region",
    ]


def test_no_violations_raise_nothing() -> None:
    violations = FieldViolations()
    violations.check(True, "a", "fine")
    violations.raise_if_any()
    assert not violations


def test_reason_and_retry_delay_become_error_info_and_retry_info() -> None:
    error = ServiceError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "slow down",
        reason="RATE_LIMITED",
        retry_delay_seconds=1.5,
    )
    status = _details(error)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "RATE_LIMITED"
    assert status.details[1].Unpack(retry)
    assert retry.retry_delay.ToNanoseconds() == 1_500_000_000


def _error_info(error: ServiceError) -> error_details_pb2.ErrorInfo:
    infos = [d for d in _details(error).details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    return info


def test_not_found_names_the_kind_of_resource_for_clients_to_branch_on() -> None:
    warehouse = not_found(Resource.WAREHOUSE, "wh-1")
    execution = not_found(Resource.EXECUTION, "ex-1", "it may have been deleted")
    assert warehouse.code == execution.code == grpc.StatusCode.NOT_FOUND
    assert warehouse.message == "warehouse wh-1 not found"
    assert execution.message == "execution ex-1 not found; it may have been deleted"
    assert _error_info(warehouse).reason == "WAREHOUSE_NOT_FOUND"
    assert _error_info(execution).reason == "EXECUTION_NOT_FOUND"
    assert _error_info(execution).domain == ERROR_DOMAIN
    resource = error_details_pb2.ResourceInfo()
    assert any(d.Unpack(resource) for d in _details(execution).details)
    assert (resource.resource_type, resource.resource_name) == ("execution", "ex-1")


def test_every_error_carries_error_info_its_code_when_no_finer_reason() -> None:
    plain = ServiceError(grpc.StatusCode.UNAUTHENTICATED, "token has expired")
    assert _error_info(plain).reason == "UNAUTHENTICATED"
    assert _error_info(plain).domain == ERROR_DOMAIN
    violations = FieldViolations()
    violations.add("warehouse_id", "is required")
    with pytest.raises(ServiceError) as raised:
        violations.raise_if_any()
    assert _error_info(raised.value).reason == "INVALID_ARGUMENT"


def test_a_relayed_error_keeps_the_reason_it_came_with() -> None:
    original = not_found(Resource.WAREHOUSE, "wh-1")
    relayed = ServiceError(original.code, original.message, details=_details(original).details)
    assert _error_info(relayed).reason == "WAREHOUSE_NOT_FOUND"
