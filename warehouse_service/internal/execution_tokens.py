"""Executions' own tokens, and the storage credentials their Spark tasks renew with them.

An execution's Spark tasks run in the same Python workers as users' functions, so they hold
no catalog token. When a unit starts an execution it asks the registry for the execution's
token: an internal token signed with the registry's key, role ``EXECUTION``, the execution's
id as subject, its warehouse and its one action as claims, lasting the execution's run time
limit (at most EXECUTION_TOKEN_MAX_SECONDS; the unit asks again past that). With it a task
may only call VendTableCredentials, for a table named as one of the execution's own, whose
properties say so, in its warehouse, while the execution has not ended: the registry loads
the table with its own catalog token and hands on the vended credentials alone.
"""

from __future__ import annotations

from typing import Any

import grpc
import jwt

from catalog_map.credentials import EXPIRES_AT
from lake_tables.naming import EXECUTION_ID, is_execution_table
from service_runtime.auth import EXECUTION_ROLE, Identity
from service_runtime.errors import Resource, ServiceError, failed_precondition, not_found
from service_runtime.internal_tokens import MESH_AUDIENCE, REGISTRY_ISSUER, TokenSigner
from texera.lake.internal.v1 import execution_credentials_pb2
from warehouse_service.api.catalog_errors import catalog_refused_registry, catalog_unavailable
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable
from warehouse_service.catalog.vended import RENEWED_KEYS, credentials_for
from warehouse_service.domain.states import TERMINAL_STATES
from warehouse_service.store.db import Record

#: The one action an execution's token allows.
RENEW_TABLE_CREDENTIALS = "renew-table-credentials"
WAREHOUSE_CLAIM = "warehouse"
ACTION_CLAIM = "action"
_GONE = ("DELETING", "DELETED")


class ExecutionTokens:
    """Issues executions' tokens with the registry's key."""

    def __init__(self, signing_key_pem: str, max_seconds: float) -> None:
        self._signer = TokenSigner(signing_key_pem, REGISTRY_ISSUER)
        self._max = max_seconds

    def issue(self, execution_id: str, warehouse_id: str, lifetime_seconds: float) -> str:
        return self._signer.mint(
            execution_id,
            EXECUTION_ROLE,
            MESH_AUDIENCE,
            ttl_seconds=max(1.0, min(lifetime_seconds, self._max)),
            claims={WAREHOUSE_CLAIM: warehouse_id, ACTION_CLAIM: RENEW_TABLE_CREDENTIALS},
        )


def expires_at(token: str) -> int:
    """When a token the registry just signed expires (seconds since the epoch)."""
    return int(jwt.decode(token, options={"verify_signature": False})["exp"])


def _denied(message: str, reason: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.PERMISSION_DENIED, message, reason=reason)


def check_grant(identity: Identity, execution_id: str, row: Record | None) -> None:
    """The token names this execution, its warehouse and the renewal, and the execution has
    not ended; PERMISSION_DENIED otherwise (the same for an execution that does not exist)."""
    if (
        identity.user_id != execution_id
        or identity.claims.get(ACTION_CLAIM) != RENEW_TABLE_CREDENTIALS
        or row is None
        or identity.claims.get(WAREHOUSE_CLAIM) != str(row["warehouse_id"])
    ):
        raise _denied(
            f"this token does not name execution {execution_id}", "EXECUTION_TOKEN_MISMATCH"
        )
    if row["state"] in TERMINAL_STATES:
        raise _denied(f"execution {execution_id} has ended", "EXECUTION_ENDED")


def _no_table(namespace: str, name: str) -> ServiceError:
    return not_found(Resource.TABLE, f"{namespace}.{name}")


async def vend(
    catalog: CatalogClient,
    row: Record,
    request: execution_credentials_pb2.VendTableCredentialsRequest,
) -> execution_credentials_pb2.VendTableCredentialsResponse:
    """The credentials the catalog vends to the registry for one of the execution's tables
    (row: the execution with its warehouse's state and catalog name); TABLE_NOT_FOUND for any
    other table, whether it exists or not."""
    execution_id, namespace, name = request.execution_id, request.namespace, request.table_name
    if row["warehouse_state"] in _GONE or not is_execution_table(execution_id, namespace, name):
        raise _no_table(namespace, name)
    try:
        prefix = await catalog.prefix(row["catalog_warehouse_name"])
        loaded: dict[str, Any] = await catalog.load_table(prefix, (namespace,), name)
    except CatalogError as exc:
        if exc.status == 404:
            raise _no_table(namespace, name) from exc
        raise catalog_refused_registry(exc) from exc
    except CatalogUnavailable as exc:
        raise catalog_unavailable(exc) from exc
    metadata = loaded["metadata"]
    if (metadata.get("properties") or {}).get(EXECUTION_ID) != execution_id:
        raise _no_table(namespace, name)
    location = str(metadata["location"])
    vended = credentials_for(loaded, location)
    if vended is None:
        raise failed_precondition(
            f"the catalog vends no storage credentials for {namespace}.{name}",
            reason="NO_VENDED_CREDENTIALS",
        )
    response = execution_credentials_pb2.VendTableCredentialsResponse(
        prefix=location, config={k: vended[k] for k in RENEWED_KEYS if k in vended}
    )
    if expiry := vended.get(EXPIRES_AT):
        response.expire_time.FromMilliseconds(int(expiry))
    return response
