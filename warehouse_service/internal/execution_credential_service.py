"""ExecutionCredentialService: an execution's token for its Spark tasks, the storage credentials
they renew with it, and the execution's catalog through the registry's catalog gatekeeper."""

from __future__ import annotations

from typing import Any

from service_runtime.callers import require_execution, require_unit
from service_runtime.context import current_identity
from service_runtime.errors import FieldViolations, Resource, not_found
from service_runtime.identifiers import check_identifier
from texera.lake.internal.v1 import (
    execution_credentials_pb2,
    registry_service_pb2,
    registry_service_pb2_grpc,
)
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.domain.states import TERMINAL_STATES
from warehouse_service.gatekeeper.access import ExecutionCatalogs
from warehouse_service.internal import execution_tokens
from warehouse_service.internal.registry_checks import ended, same_caller
from warehouse_service.store import executions
from warehouse_service.store.db import Database, Record


class ExecutionCredentialServicer(registry_service_pb2_grpc.ExecutionCredentialServiceServicer):
    def __init__(
        self,
        db: Database,
        catalog: CatalogClient,
        tokens: execution_tokens.ExecutionTokens,
        execution_catalogs: ExecutionCatalogs,
    ) -> None:
        self._db = db
        self._catalog = catalog
        self._tokens = tokens
        self._execution_catalogs = execution_catalogs

    async def OpenExecutionCatalog(
        self, request: registry_service_pb2.OpenExecutionCatalogRequest, context: Any
    ) -> registry_service_pb2.OpenExecutionCatalogResponse:
        binding = await self._execution_catalogs.open(current_identity(), request)
        return registry_service_pb2.OpenExecutionCatalogResponse(binding=binding)

    async def _with_warehouse(self, execution_id: str) -> Record | None:
        async with self._db.connection() as connection:
            return await executions.with_warehouse(connection, execution_id)

    async def IssueExecutionToken(
        self, request: execution_credentials_pb2.IssueExecutionTokenRequest, context: Any
    ) -> execution_credentials_pb2.IssueExecutionTokenResponse:
        unit = require_unit()
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        check_identifier(violations, request.computing_unit_id, "computing_unit_id")
        lifetime = request.lifetime.ToTimedelta().total_seconds()
        violations.check(lifetime > 0, "lifetime", "must be positive")
        violations.raise_if_any()
        same_caller(unit, request.computing_unit_id)
        row = await self._with_warehouse(request.execution_id)
        if row is None or row["computing_unit_id"] != request.computing_unit_id:
            raise not_found(Resource.EXECUTION, request.execution_id)
        if row["state"] in TERMINAL_STATES:
            raise ended(request.execution_id, row["state"])
        token = self._tokens.issue(request.execution_id, str(row["warehouse_id"]), lifetime)
        response = execution_credentials_pb2.IssueExecutionTokenResponse(execution_token=token)
        response.expire_time.FromSeconds(execution_tokens.expires_at(token))
        return response

    async def VendTableCredentials(
        self, request: execution_credentials_pb2.VendTableCredentialsRequest, context: Any
    ) -> execution_credentials_pb2.VendTableCredentialsResponse:
        identity = require_execution()
        violations = FieldViolations()
        check_identifier(violations, request.execution_id, "execution_id")
        violations.check(bool(request.namespace), "namespace", "is required")
        violations.check(
            0 < len(request.table_name) <= 255, "table_name", "must be 1 to 255 characters"
        )
        violations.raise_if_any()
        row = await self._with_warehouse(request.execution_id)
        execution_tokens.check_grant(identity, request.execution_id, row)
        assert row is not None  # check_grant refuses a missing execution
        return await execution_tokens.vend(self._catalog, row, request)
