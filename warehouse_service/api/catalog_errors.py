"""How the catalog's refusals and outages reach the registry's callers: each as the canonical
gRPC status the caller should see, with the catalog's reason in ErrorInfo and never a
credential of the request in its message."""

from __future__ import annotations

import logging

import grpc

from service_runtime.errors import FieldViolation, ServiceError, invalid_argument
from texera.lake.v1 import warehouse_pb2
from warehouse_service.catalog import catalog_purge
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable

log = logging.getLogger("warehouse_service.api.catalog_errors")

#: The catalog's error type for a storage location that overlaps another warehouse's.
OVERLAP = "CreateWarehouseStorageProfileOverlap"
#: The request field of the storage endpoint.
ENDPOINT_FIELD = "warehouse.storage.endpoint"
#: Catalog error types of storage validation, and the request field each is about.
_STORAGE_FIELDS = {
    "StorageCredentialInvalid": "credentials",
    "StorageAccessDenied": "credentials",
    "StorageBucketNotFound": "warehouse.storage.bucket",
    "InvalidStorageProfile": "warehouse.storage",
    "InvalidStorageCredential": "credentials",
    "StorageEndpointNotAllowed": ENDPOINT_FIELD,
}


def _scrub(message: str, credentials: warehouse_pb2.S3Credentials | None) -> str:
    """The catalog's message with any credential it might echo removed."""
    if credentials is not None:
        for secret in (credentials.access_key_id, credentials.secret_access_key):
            if secret:
                message = message.replace(secret, "[REDACTED]")
    return message


def catalog_failure(
    exc: CatalogError, credentials: warehouse_pb2.S3Credentials | None = None
) -> ServiceError:
    """A catalog refusal as the canonical status the caller should see."""
    message = _scrub(exc.message or exc.error_type or f"HTTP {exc.status}", credentials)
    if exc.error_type == OVERLAP:
        return ServiceError(
            grpc.StatusCode.ALREADY_EXISTS,
            f"the storage location overlaps another warehouse: {message}",
            reason="STORAGE_LOCATION_OVERLAP",
        )
    if exc.error_type == "StorageEndpointUnreachable":
        return ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the catalog cannot reach the storage: {message}",
            reason="STORAGE_UNREACHABLE",
        )
    if exc.status in (400, 422):
        field = _STORAGE_FIELDS.get(exc.error_type, "warehouse.storage")
        return invalid_argument(
            [FieldViolation(field, f"the catalog refused the storage: {message}")]
        )
    if exc.status in (401, 403):
        return catalog_refused_registry(exc)
    return ServiceError(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"the catalog refused the request: {message}",
        reason=exc.error_type,
    )


def catalog_refused_registry(exc: CatalogError) -> ServiceError:
    """The catalog refused the registry itself. 401 (its credential is wrong or unknown) is an
    operator's problem, UNAVAILABLE until fixed; 403 (not allowed there) is PERMISSION_DENIED.
    Either way the catalog's own reason goes along in ErrorInfo."""
    log.error(
        "the catalog refused the registry", extra={"status": exc.status, "type": exc.error_type}
    )
    metadata = {"catalog_status": str(exc.status), "catalog_error": exc.error_type}
    if exc.status == 401:
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            "the catalog does not accept the registry's credential; an operator must fix it",
            reason="CATALOG_UNAUTHORIZED",
            metadata=metadata,
        )
    return ServiceError(
        grpc.StatusCode.PERMISSION_DENIED,
        f"the catalog does not allow this: {exc.message or exc.error_type}",
        reason="CATALOG_FORBIDDEN",
        metadata=metadata,
    )


def catalog_delete_failure(exc: CatalogError) -> ServiceError:
    """A refusal while emptying or deleting a warehouse. No storage was sent, so none is to
    blame: a 4xx here is the catalog's state (409: still not empty) or the registry's request."""
    if exc.status in (401, 403):
        return catalog_refused_registry(exc)
    metadata = {"catalog_status": str(exc.status), "catalog_error": exc.error_type}
    message = exc.message or exc.error_type or f"HTTP {exc.status}"
    if exc.error_type == catalog_purge.PROTECTED:  # 409 from Lakekeeper; whatever the status
        return ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the catalog protects the warehouse from deletion: {message}; lift its protection "
            "in the catalog, then delete it again",
            reason="WAREHOUSE_PROTECTED",
            metadata=metadata,
        )
    if exc.status == 409:
        return ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the catalog keeps the warehouse: {message}; retry the delete",
            reason="CATALOG_WAREHOUSE_BUSY",
            metadata=metadata,
        )
    log.error("the catalog refused a delete", extra=metadata)
    return ServiceError(
        grpc.StatusCode.INTERNAL,
        f"the catalog refused the registry's delete request: {message}",
        reason="CATALOG_REFUSED_DELETE",
        metadata=metadata,
    )


def catalog_unavailable(exc: CatalogUnavailable) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        f"the catalog is unavailable; retry later ({exc})",
        reason="CATALOG_UNAVAILABLE",
    )
