"""IcebergAccessService, which the gateway serves itself: where an execution's tables are in
the Iceberg REST catalog, and a short-lived access token to read them with."""

from __future__ import annotations

from typing import Any

import grpc

from catalog_map.registry import RegistryReader
from gateway.iceberg_rest.callers import IcebergCallers
from gateway.iceberg_rest.tables import VISIBLE_STATES, iceberg_tables
from service_runtime.context import current_identity
from service_runtime.errors import FieldViolations, ServiceError, failed_precondition
from service_runtime.identifiers import check_identifier
from texera.lake.v1 import execution_pb2
from texera.lake.v1 import iceberg_access_service_pb2 as ia


class IcebergAccess:
    """GetIcebergAccess, for the catalog at catalog_uri; without one, UNIMPLEMENTED."""

    def __init__(
        self, registry: RegistryReader, callers: IcebergCallers | None, catalog_uri: str
    ) -> None:
        self._registry = registry
        self._callers = callers
        self._catalog_uri = catalog_uri

    async def GetIcebergAccess(self, request: bytes, context: Any) -> ia.GetIcebergAccessResponse:
        if self._callers is None:
            raise ServiceError(
                grpc.StatusCode.UNIMPLEMENTED,
                "this gateway serves no Iceberg REST catalog (TEXERA_LAKE_GATEWAY_ICEBERG_PORT)",
            )
        execution_id = ia.GetIcebergAccessRequest.FromString(request).execution_id
        violations = FieldViolations()
        check_identifier(violations, execution_id, "execution_id")
        violations.raise_if_any()
        execution = (await self._registry.resolve_execution(execution_id)).execution
        if execution.state not in VISIBLE_STATES:
            raise failed_precondition(
                f"execution {execution_id} is {execution_pb2.ExecutionState.Name(execution.state)}:"
                " the catalog shows running and succeeded executions' tables only",
                reason="EXECUTION_NOT_READABLE",
            )
        token, expires = self._callers.access_token(current_identity().user_id)
        response = ia.GetIcebergAccessResponse(
            catalog_uri=self._catalog_uri,
            warehouse=execution.warehouse_id,
            tables=iceberg_tables(execution),
            token=token,
        )
        response.token_expire_time.FromMilliseconds(int(expires * 1000))
        return response
