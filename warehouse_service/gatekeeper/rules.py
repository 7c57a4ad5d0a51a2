"""What the gatekeeper lets an execution's token do: each Iceberg REST request classified,
and the bodies of the requests that change a table checked. Pure decisions, no I/O.

Only what a computing unit's catalog client asks is recognised (pyiceberg's RestCatalog:
config, namespaces, create, load, commit, purge, a table's credentials); anything else is
refused. A table is the execution's own when its name is one of the execution's (see
lake_tables.naming) and, once loaded, its properties name the execution; a source is a table
the token lists.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from lake_tables.naming import EXECUTION_ID, NAMESPACES, is_execution_table
from warehouse_service.gatekeeper.tokens import ExecutionGrant, TableName

#: Namespace levels in a path, as Iceberg REST joins them.
UNIT_SEPARATOR = "\x1f"
#: Table properties that would move where a table's files go; an execution cannot set them.
_PLACEMENT_PROPERTIES = frozenset(
    {
        "write.data.path",
        "write.metadata.path",
        "write.object-storage.path",
        "write.folder-storage.path",
    }
)


class Refused(Exception):
    """The request is not allowed: HTTP status, Iceberg error type and message."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def forbidden(message: str) -> Refused:
    return Refused(403, "ForbiddenException", message)


def no_such_table(table: TableName) -> Refused:
    return Refused(404, "NoSuchTableException", f"Table does not exist: {'.'.join(table)}")


class Kind(enum.Enum):
    CONFIG = "config"
    CREATE_NAMESPACE = "create namespace"
    LOAD_NAMESPACE = "load namespace"
    CREATE_TABLE = "create table"
    LOAD_TABLE = "load table"
    COMMIT_TABLE = "commit table"
    PURGE_TABLE = "purge table"
    TABLE_CREDENTIALS = "table credentials"


@dataclass(frozen=True)
class Route:
    """A recognised request: its kind, the warehouse prefix, and what it names."""

    kind: Kind
    prefix: str = ""
    namespace: tuple[str, ...] = ()
    table: str = ""

    @property
    def table_name(self) -> TableName:
        return (*self.namespace, self.table)


_TABLE_ROUTES = {
    ("GET", ""): Kind.LOAD_TABLE,
    ("HEAD", ""): Kind.LOAD_TABLE,
    ("POST", ""): Kind.COMMIT_TABLE,
    ("DELETE", ""): Kind.PURGE_TABLE,
    ("GET", "credentials"): Kind.TABLE_CREDENTIALS,
}


def route(method: str, parts: list[str]) -> Route:
    """The request for method and the decoded path segments after /v1/; Refused (403) for
    anything a unit's catalog client does not ask."""
    match parts:
        case ["config"] if method == "GET":
            return Route(Kind.CONFIG)
        case [prefix, "namespaces"] if method == "POST":
            return Route(Kind.CREATE_NAMESPACE, prefix)
        case [prefix, "namespaces", namespace] if method in ("GET", "HEAD"):
            return Route(Kind.LOAD_NAMESPACE, prefix, _levels(namespace))
        case [prefix, "namespaces", namespace, "tables"] if method == "POST":
            return Route(Kind.CREATE_TABLE, prefix, _levels(namespace))
        case [prefix, "namespaces", namespace, "tables", table, *rest] if len(rest) <= 1:
            kind = _TABLE_ROUTES.get((method, rest[0] if rest else ""))
            if kind is not None:
                return Route(kind, prefix, _levels(namespace), table)
    raise forbidden(f"a computing unit's catalog access does not include {method} of this path")


def _levels(namespace: str) -> tuple[str, ...]:
    return tuple(namespace.split(UNIT_SEPARATOR))


def is_own(grant: ExecutionGrant, table: TableName) -> bool:
    """Whether table is named as one of the execution's own."""
    return len(table) == 2 and is_execution_table(grant.execution_id, table[0], table[1])


def check_namespace(namespace: tuple[str, ...]) -> None:
    """Only the namespaces executions write into."""
    if len(namespace) != 1 or namespace[0] not in NAMESPACES:
        raise forbidden(f"namespaces other than {', '.join(NAMESPACES)} are out of reach")


def check_new_namespace(body: Any) -> None:
    if not isinstance(body, dict) or not isinstance(body.get("namespace"), list):
        raise Refused(400, "BadRequestException", "a namespace is created with its name")
    if body.get("properties"):
        raise forbidden("an execution creates namespaces without properties")
    check_namespace(tuple(str(level) for level in body["namespace"]))


def new_table(found: Route, body: Any) -> TableName:
    """The name of the table a create request makes."""
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise Refused(400, "BadRequestException", "a table is created with its name")
    return (*found.namespace, body["name"])


def check_new_table(grant: ExecutionGrant, found: Route, body: Any) -> None:
    """A table created must be one of the execution's, say so in its properties, and be
    placed where the catalog places it."""
    table = new_table(found, body)
    if not is_own(grant, table):
        raise forbidden(f"execution {grant.execution_id} may create only its own tables")
    if body.get("location") or body.get("stage-create"):
        raise forbidden("an execution's tables go where the catalog places them")
    properties = body.get("properties") or {}
    if not isinstance(properties, dict) or properties.get(EXECUTION_ID) != grant.execution_id:
        raise forbidden(f"a table of execution {grant.execution_id} names it in {EXECUTION_ID}")
    _check_properties(properties)


def check_commit(body: Any) -> None:
    """A commit may not move the table, nor change which execution it belongs to or where its
    files go."""
    updates = body.get("updates") if isinstance(body, dict) else None
    if not isinstance(updates, list):
        raise Refused(400, "BadRequestException", "a commit lists its updates")
    for update in updates:
        if not isinstance(update, dict):
            raise Refused(400, "BadRequestException", "an update is an object")
        action = update.get("action")
        if action == "set-location":
            raise forbidden("an execution's tables stay where the catalog placed them")
        if action == "set-properties":
            _check_properties(update.get("updates") or {}, changing=True)
        if action == "remove-properties" and EXECUTION_ID in (update.get("removals") or []):
            raise forbidden(f"{EXECUTION_ID} cannot be removed")


def _check_properties(properties: Any, *, changing: bool = False) -> None:
    if not isinstance(properties, dict):
        raise Refused(400, "BadRequestException", "properties are an object")
    if changing and EXECUTION_ID in properties:
        raise forbidden(f"{EXECUTION_ID} cannot be changed")
    placed = _PLACEMENT_PROPERTIES & properties.keys()
    if placed:
        raise forbidden(f"an execution cannot set {', '.join(sorted(placed))}")


def belongs_to(grant: ExecutionGrant, metadata: Any) -> bool:
    """Whether a loaded table's metadata names the execution (another execution's id may
    sanitize to the same name)."""
    properties = metadata.get("properties") if isinstance(metadata, dict) else None
    return isinstance(properties, dict) and properties.get(EXECUTION_ID) == grant.execution_id
