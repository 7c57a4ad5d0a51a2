"""ServiceError carries the canonical code and google.rpc.Status details."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from service_runtime.errors import FieldViolations, ServiceError


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
