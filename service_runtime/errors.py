"""Errors as canonical gRPC status codes with ``google.rpc.Status`` details.

Handlers raise ServiceError; the server interceptor turns it into the call's
status, with the rich details in the ``grpc-status-details-bin`` trailer:
BadRequest field violations for bad input, ResourceInfo naming what was not
found, RetryInfo when the caller should wait before retrying, and on every
error an ErrorInfo whose reason a client can branch on (the status code's name
where no finer reason applies). Messages name the offending field and never
carry secrets or stack traces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

ERROR_DOMAIN = "lake.texera.org"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: its path (``warehouse.storage.bucket``) and why."""

    field: str
    description: str


class ServiceError(Exception):
    """An error to return to the caller with a canonical status code."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        violations: Iterable[FieldViolation] = (),
        reason: str = "",
        metadata: dict[str, str] | None = None,
        retry_delay_seconds: float | None = None,
        details: Iterable[any_pb2.Any] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = tuple(violations)
        self.reason = reason
        self.metadata = metadata or {}
        self.retry_delay_seconds = retry_delay_seconds
        self.details = tuple(details)

    @classmethod
    def relayed(cls, error: grpc.aio.AioRpcError) -> ServiceError:
        """Another service's error, passed on with its code, message and details."""
        return cls(
            error.code(), error.details() or error.code().name, details=status_details(error)
        )

    def to_status(self) -> grpc.Status:
        status = status_pb2.Status(
            code=self.code.value[0], message=self.message, details=self.details
        )
        if self.violations:
            bad_request = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=v.field, description=v.description
                    )
                    for v in self.violations
                ]
            )
            status.details.append(_pack(bad_request))
        if not any(d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) for d in status.details):
            info = error_details_pb2.ErrorInfo(
                reason=self.reason or self.code.name, domain=ERROR_DOMAIN, metadata=self.metadata
            )
            status.details.append(_pack(info))
        if self.retry_delay_seconds is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(self.retry_delay_seconds * 1e9))
            status.details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
        return rpc_status.to_status(status)


def _pack(
    detail: error_details_pb2.BadRequest
    | error_details_pb2.ErrorInfo
    | error_details_pb2.RetryInfo
    | error_details_pb2.ResourceInfo,
) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def invalid_argument(violations: Iterable[FieldViolation]) -> ServiceError:
    """INVALID_ARGUMENT whose message lists every bad field."""
    violations = tuple(violations)
    summary = "; ".join(f"{v.field}: {v.description}" for v in violations)
    return ServiceError(
        grpc.StatusCode.INVALID_ARGUMENT, f"invalid request: {summary}", violations=violations
    )


def malformed_request(cause: str) -> ServiceError:
    """INVALID_ARGUMENT for a request whose bytes are not the method's request message;
    cause is the decoder's message."""
    return ServiceError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request could not be decoded: {cause}",
        reason="MALFORMED_REQUEST",
    )


class Resource(Enum):
    """What a caller may name and not find; NOT_FOUND's reason is ``<NAME>_NOT_FOUND``."""

    WAREHOUSE = "warehouse"
    EXECUTION = "execution"
    COMPUTING_UNIT = "computing unit"
    UNIT_REGISTRATION = "live registration of computing unit"
    RESULT = "result"
    SNAPSHOT = "snapshot"
    TABLE = "table"


def not_found(resource: Resource, name: str, hint: str = "") -> ServiceError:
    """NOT_FOUND for the resource of that kind and name, with ResourceInfo and a reason such
    as WAREHOUSE_NOT_FOUND; `hint` says what to do about it."""
    info = error_details_pb2.ResourceInfo(
        resource_type=resource.value, resource_name=name, description=hint
    )
    return ServiceError(
        grpc.StatusCode.NOT_FOUND,
        f"{resource.value} {name} not found" + (f"; {hint}" if hint else ""),
        reason=f"{resource.name}_NOT_FOUND",
        details=(_pack(info),),
    )


def failed_precondition(message: str, *, reason: str = "") -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, message, reason=reason)


class FieldViolations:
    """Collects the bad fields of a request, so that one error names them all."""

    def __init__(self) -> None:
        self._violations: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self._violations.append(FieldViolation(field, description))

    def check(self, ok: bool, field: str, description: str) -> None:
        if not ok:
            self.add(field, description)

    def __bool__(self) -> bool:
        return bool(self._violations)

    def raise_if_any(self) -> None:
        if self._violations:
            raise invalid_argument(self._violations)


def status_details(call: Any) -> tuple[any_pb2.Any, ...]:
    """The google.rpc.Status details a failed call (synchronous or asyncio) carries in its
    trailers; none when it carries no Status."""
    raw = dict(call.trailing_metadata() or ()).get("grpc-status-details-bin")
    return tuple(status_pb2.Status.FromString(raw).details) if isinstance(raw, bytes) else ()
