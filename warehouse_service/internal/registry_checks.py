"""Checks the registry's internal services share: a unit acting for itself alone, and an
execution that has ended."""

from __future__ import annotations

import grpc

from service_runtime.auth import Identity
from service_runtime.errors import ServiceError, failed_precondition


def same_caller(identity: Identity, computing_unit_id: str) -> None:
    """PERMISSION_DENIED unless the calling unit is computing_unit_id."""
    if identity.user_id != computing_unit_id:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            "a computing unit may act only for itself (its token's subject)",
        )


def ended(execution_id: str, state: str) -> ServiceError:
    """FAILED_PRECONDITION (EXECUTION_ENDED) for an execution in a terminal state."""
    return failed_precondition(
        f"execution {execution_id} already ended {state.lower()}", reason="EXECUTION_ENDED"
    )
