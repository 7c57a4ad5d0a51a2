"""ExecutionCredentialService.OpenExecutionCatalog: who may have an execution's catalog token, for which
source tables, and the binding that carries it."""

from __future__ import annotations

import grpc

from service_runtime.auth import Identity
from service_runtime.errors import FieldViolations, ServiceError, failed_precondition
from service_runtime.identifiers import check_identifier
from texera.lake.internal.v1 import registry_service_pb2
from warehouse_service.api.validation import check_uuid
from warehouse_service.domain.permissions import Role
from warehouse_service.domain.states import TERMINAL_STATES, WAREHOUSE_STATES
from warehouse_service.gatekeeper.tokens import ExecutionGrant, GatekeeperTokens, TableName
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store.db import Database, Record
from warehouse_service.store.gatekeeper import GatekeeperStore

rs = registry_service_pb2
#: Source tables one execution may name.
MAX_SOURCE_TABLES = 64
MAX_NAME_LENGTH = 256
_GONE = ("DELETING", "DELETED")


def _denied(message: str, reason: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.PERMISSION_DENIED, message, reason=reason)


def check_request(request: rs.OpenExecutionCatalogRequest) -> list[TableName]:
    """INVALID_ARGUMENT naming every bad field; the source tables otherwise."""
    violations = FieldViolations()
    check_identifier(violations, request.execution_id, "execution_id")
    check_uuid(violations, request.warehouse_id, "warehouse_id")
    check_identifier(violations, request.computing_unit_id, "computing_unit_id")
    violations.check(
        len(request.source_tables) <= MAX_SOURCE_TABLES,
        "source_tables",
        f"at most {MAX_SOURCE_TABLES} tables",
    )
    tables: list[TableName] = []
    for index, source in enumerate(request.source_tables[:MAX_SOURCE_TABLES]):
        parts = (*source.namespace, source.name)
        violations.check(
            bool(source.namespace) and all(0 < len(p) <= MAX_NAME_LENGTH for p in parts),
            f"source_tables[{index}]",
            f"needs a namespace and a name, each part 1 to {MAX_NAME_LENGTH} characters",
        )
        tables.append(parts)
    violations.raise_if_any()
    return tables


class ExecutionCatalogs:
    """Grants executions their catalog tokens and says where the gatekeeper is."""

    def __init__(
        self,
        db: Database,
        tokens: GatekeeperTokens | None,
        gatekeeper_uri: str,
        rules: ModeRules,
    ) -> None:
        self._db = db
        self._store = GatekeeperStore(db)
        self._tokens = tokens
        self._uri = gatekeeper_uri
        self._rules = rules

    async def open(
        self, identity: Identity, request: rs.OpenExecutionCatalogRequest
    ) -> rs.CatalogBinding:
        sources = check_request(request)
        unit = identity if identity.is_unit else identity.via
        if unit is None or not unit.is_unit or unit.user_id != request.computing_unit_id:
            raise _denied(
                "only a computing unit opens its executions' catalogs, for itself",
                "NOT_THE_UNIT",
            )
        if identity.is_user:
            warehouse, owner = await self._for_submission(identity, request, sources)
        else:
            warehouse, owner = await self._for_renewal(request, sources)
        if warehouse["state"] in _GONE:
            raise failed_precondition(
                f"warehouse {request.warehouse_id} is being deleted", reason="WAREHOUSE_DELETING"
            )
        if (sql := self._rules.sql_binding(warehouse)) is not None:
            return sql
        assert self._tokens is not None, "the gatekeeper serves every REST catalog mode"
        grant = ExecutionGrant(
            request.execution_id, request.warehouse_id, unit.user_id, owner, frozenset(sources)
        )
        token, expires = self._tokens.issue(grant)
        binding = rs.CatalogBinding(
            warehouse_id=request.warehouse_id,
            owner_user_id=warehouse["owner_user_id"],
            state=WAREHOUSE_STATES[warehouse["state"]],
            backend=rs.CATALOG_BACKEND_REST,
            catalog_uri=self._uri,
            catalog_warehouse=request.warehouse_id,
            credential_version=warehouse["credential_version"],
            catalog_token=token,
        )
        binding.catalog_token_expire_time.FromNanoseconds(int(expires * 1e9))
        return binding

    async def _for_submission(
        self,
        user: Identity,
        request: rs.OpenExecutionCatalogRequest,
        sources: list[TableName],
    ) -> tuple[Record, str]:
        """While a unit serves a submission: the user must be the warehouse's writer, the
        execution (if bound already) the user's on this unit, and in a global mode every
        source a result of the user's own executions."""
        async with self._db.connection() as connection:
            warehouse, _ = await self._rules.warehouse_as(
                connection, request.warehouse_id, user.user_id, Role.WRITER
            )
        bound = await self._store.execution(request.execution_id)
        if bound is not None:
            self._check_bound(bound, request, user.user_id)
        if self._rules.submitter_only and sources:
            readable = await self._store.results_of(user.user_id, request.warehouse_id, sources)
            for index, table in enumerate(sources):
                if table not in readable:
                    raise _denied(
                        f"source_tables[{index}] is not a result of your own executions",
                        "SOURCE_TABLE_NOT_READABLE",
                    )
        return warehouse, user.user_id

    async def _for_renewal(
        self, request: rs.OpenExecutionCatalogRequest, sources: list[TableName]
    ) -> tuple[Record, str]:
        """A unit alone renews the token of an execution bound to it that has not ended."""
        if sources:
            raise _denied(
                "source tables are named while serving the submission only",
                "SOURCE_TABLES_AT_SUBMISSION",
            )
        bound = await self._store.execution(request.execution_id)
        if bound is None:
            raise _denied(
                f"execution {request.execution_id} is not bound to this unit", "NOT_THE_UNIT"
            )
        self._check_bound(bound, request, bound["owner_user_id"])
        warehouse = await self._store.warehouse(request.warehouse_id)
        assert warehouse is not None  # an execution's warehouse stays while it does
        return warehouse, str(bound["owner_user_id"])

    @staticmethod
    def _check_bound(row: Record, request: rs.OpenExecutionCatalogRequest, owner: str) -> None:
        if (
            row["computing_unit_id"] != request.computing_unit_id
            or str(row["warehouse_id"]) != request.warehouse_id
            or row["owner_user_id"] != owner
        ):
            raise _denied(
                f"execution {request.execution_id} is not bound to this unit", "NOT_THE_UNIT"
            )
        if row["state"] in TERMINAL_STATES:
            raise failed_precondition(
                f"execution {request.execution_id} already ended", reason="EXECUTION_ENDED"
            )
