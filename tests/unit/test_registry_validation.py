"""The registry's validation rules and its mapping of catalog refusals."""

from __future__ import annotations

import grpc
import pytest

from service_runtime.errors import FieldViolations, ServiceError
from texera.lake.v1 import warehouse_pb2
from warehouse_service.api.catalog_errors import catalog_failure
from warehouse_service.api.validation import bucket_problem, endpoint_problem, key_prefix_problem
from warehouse_service.catalog.tables import CatalogError


@pytest.mark.parametrize("bucket", ["abc", "my-bucket", "results.2026", "a" * 63, "0-9"])
def test_valid_bucket_names(bucket: str) -> None:
    assert bucket_problem(bucket) is None


@pytest.mark.parametrize(
    "bucket",
    [
        "ab",
        "a" * 64,
        "Upper",
        "under_score",
        "-start",
        "end-",
        "two..dots",
        "10.0.0.1",
        "xn--idn",
        "x-s3alias",
    ],
)
def test_invalid_bucket_names(bucket: str) -> None:
    assert bucket_problem(bucket) is not None


@pytest.mark.parametrize(
    "endpoint", ["http://minio:9000", "https://s3.example.org", "http://127.0.0.1:9000/"]
)
def test_valid_endpoints(endpoint: str) -> None:
    assert endpoint_problem(endpoint) is None


@pytest.mark.parametrize(
    "endpoint",
    [
        "minio:9000",
        "ftp://host",
        "http://user:pw@host",
        "http://host/path",
        "http://host?x=1",
        "http://h:99999",
    ],
)
def test_invalid_endpoints(endpoint: str) -> None:
    assert endpoint_problem(endpoint) is not None


@pytest.mark.parametrize("prefix", ["", "lake", "team/lake", "team/lake/"])
def test_valid_key_prefixes(prefix: str) -> None:
    assert key_prefix_problem(prefix) is None


@pytest.mark.parametrize("prefix", ["/abs", "a/../b", "./a", "a//b", "x" * 513, "a\nb"])
def test_invalid_key_prefixes(prefix: str) -> None:
    assert key_prefix_problem(prefix) is not None


def _details(error: ServiceError) -> str:
    return error.message


def test_catalog_refusals_map_to_canonical_codes() -> None:
    overlap = catalog_failure(
        CatalogError(400, "CreateWarehouseStorageProfileOverlap", "overlaps wh-1")
    )
    assert overlap.code == grpc.StatusCode.ALREADY_EXISTS
    bad_key = catalog_failure(
        CatalogError(400, "StorageCredentialInvalid", "secret does not match")
    )
    assert bad_key.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in bad_key.violations] == ["credentials"]
    unknown_400 = catalog_failure(CatalogError(400, "SomethingNew", "bucket policy says no"))
    assert unknown_400.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "bucket policy says no" in unknown_400.message
    unreachable = catalog_failure(CatalogError(400, "StorageEndpointUnreachable", "cannot reach"))
    assert unreachable.code == grpc.StatusCode.FAILED_PRECONDITION
    forbidden = catalog_failure(CatalogError(403, "ForbiddenException", "not this warehouse"))
    assert (forbidden.code, forbidden.reason) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "CATALOG_FORBIDDEN",
    )
    assert forbidden.metadata == {"catalog_status": "403", "catalog_error": "ForbiddenException"}
    unauthorized = catalog_failure(CatalogError(401, "NotAuthorizedException", "expired"))
    assert (unauthorized.code, unauthorized.reason) == (
        grpc.StatusCode.UNAVAILABLE,
        "CATALOG_UNAUTHORIZED",
    )
    assert unauthorized.metadata["catalog_error"] == "NotAuthorizedException"


def test_a_credential_echoed_by_the_catalog_is_scrubbed() -> None:
    credentials = warehouse_pb2.S3Credentials(
        access_key_id="AKIAECHOED", secret_access_key="echoed-secret"
    )
    error = catalog_failure(
        CatalogError(400, "StorageAccessDenied", "key AKIAECHOED with secret echoed-secret denied"),
        credentials,
    )
    assert "AKIAECHOED" not in error.message
    assert "echoed-secret" not in error.message


def test_field_violations_collect_across_checks() -> None:
    violations = FieldViolations()
    violations.check(bucket_problem("Bad") is None, "warehouse.storage.bucket", "bad")
    violations.check(key_prefix_problem("/x") is None, "warehouse.storage.key_prefix", "bad")
    with pytest.raises(ServiceError) as raised:
        violations.raise_if_any()
    assert [v.field for v in raised.value.violations] == [
        "warehouse.storage.bucket",
        "warehouse.storage.key_prefix",
    ]
