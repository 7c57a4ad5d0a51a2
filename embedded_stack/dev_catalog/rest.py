"""The Iceberg REST catalog API under /catalog, one prefix (the warehouse id) per warehouse.

Each call resolves its warehouse (faults and inactive warehouses apply), then
runs the matching pyiceberg SqlCatalog operation off the event loop.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar, cast

from aiohttp import web
from pydantic import ValidationError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    ResolveError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest, CommitTableResponse, Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate

from embedded_stack.dev_catalog.errors import bad_request, conflict, not_found
from embedded_stack.dev_catalog.permissions import Access
from embedded_stack.dev_catalog.state import CatalogState, json_body, project_of
from embedded_stack.dev_catalog.storage import delete_prefix
from embedded_stack.dev_catalog.store import WarehouseRecord, check_warehouse_name
from embedded_stack.dev_catalog.tokens import READ

T = TypeVar("T")
NAMESPACE_SEPARATOR = "\x1f"
_PREFIX = "/catalog/v1/{prefix}"
_NAMESPACE = _PREFIX + "/namespaces/{namespace}"
_TABLE = _NAMESPACE + "/tables/{table}"

#: Endpoints announced in the config response, in the spec's "METHOD /v1/..." form.
SUPPORTED_ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/tables/rename",
]


@contextmanager
def _iceberg_errors() -> Iterator[None]:
    """Maps pyiceberg's exceptions to the REST API's statuses and exception types."""
    try:
        yield
    except NoSuchNamespaceError as exc:
        raise not_found("NoSuchNamespaceException", str(exc)) from exc
    except NoSuchTableError as exc:
        raise not_found("NoSuchTableException", str(exc)) from exc
    except (NamespaceAlreadyExistsError, TableAlreadyExistsError) as exc:
        raise conflict("AlreadyExistsException", str(exc)) from exc
    except NamespaceNotEmptyError as exc:
        raise conflict("NamespaceNotEmptyException", str(exc)) from exc
    except CommitFailedException as exc:
        raise conflict("CommitFailedException", str(exc)) from exc
    except (ValidationError, ValueError) as exc:
        raise bad_request("BadRequestException", str(exc).splitlines()[0]) from exc


@contextmanager
def _parsing(what: str) -> Iterator[None]:
    """Parsing a request body into pyiceberg's models: whatever they refuse is a bad request
    (some of their validators raise TypeError or KeyError rather than a ValidationError)."""
    try:
        yield
    except (ValidationError, ValueError, TypeError, KeyError) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise bad_request("BadRequestException", f"{what}: {first_line}") from exc


def _namespace(request: web.Request) -> tuple[str, ...]:
    levels = tuple(request.match_info["namespace"].split(NAMESPACE_SEPARATOR))
    if not all(levels):
        raise bad_request("BadRequestException", "namespace levels must not be empty")
    return levels


def _table(request: web.Request) -> tuple[str, ...]:
    return (*_namespace(request), request.match_info["table"])


def _identifier(body: dict[str, Any], name: str) -> tuple[str, ...]:
    """A TableIdentifier field of a request body: a namespace of names, and a name."""
    identifier = body.get(name)
    namespace = identifier.get("namespace") if isinstance(identifier, dict) else None
    table = identifier.get("name") if isinstance(identifier, dict) else None
    if (
        not isinstance(namespace, list)
        or not namespace
        or not all(isinstance(level, str) and level for level in namespace)
        or not isinstance(table, str)
        or not table
    ):
        raise bad_request(
            "BadRequestException", f"{name} needs a namespace (a list of names) and a name"
        )
    return (*namespace, table)


def _query_int(request: web.Request, name: str, default: int, expected: str) -> int:
    value = request.query.get(name)
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise bad_request("BadRequestException", f"{name} must be {expected}")
    return int(value)


def _load_result(
    table_metadata_location: str | None, metadata_json: str, extra: dict[str, Any]
) -> web.Response:
    body = {
        "metadata-location": table_metadata_location,
        "metadata": json.loads(metadata_json),
        **extra,
    }
    return web.json_response(body)


def _exists_response(exists: bool) -> web.Response:
    """A HEAD answer: 204, or 404 with the content type of the error a GET would carry (a HEAD
    answer has no body)."""
    if exists:
        return web.Response(status=204)
    return web.Response(status=404, content_type="application/json")


class _Named:
    """What SqlCatalog.commit_table needs of its table argument: the name."""

    def __init__(self, identifier: tuple[str, ...]) -> None:
        self._identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self._identifier


class IcebergRestApi:
    """The handlers; calls on a warehouse prefix were authorized before (permissions)."""

    def __init__(self, state: CatalogState, access: Access, page_size: int) -> None:
        self.state = state
        self.access = access
        self.page_size = page_size

    def _page(self, request: web.Request, key: str, items: list[Any]) -> web.Response:
        """One page of a listing: pageSize items (at most the catalog's page size) from the
        offset pageToken names; next-page-token only when more follow, as the spec asks."""
        start = _query_int(request, "pageToken", 0, "a page token of this listing")
        size = min(
            _query_int(request, "pageSize", self.page_size, "a positive number"), self.page_size
        )
        if size < 1:
            raise bad_request("BadRequestException", "pageSize must be a positive number")
        body: dict[str, Any] = {key: items[start : start + size]}
        if start + size < len(items):
            body["next-page-token"] = str(start + size)
        return web.json_response(body)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/catalog/v1/config", self.config, allow_head=False),
            web.get(_PREFIX + "/namespaces", self.list_namespaces, allow_head=False),
            web.post(_PREFIX + "/namespaces", self.create_namespace),
            web.get(_NAMESPACE, self.load_namespace, allow_head=False),
            web.head(_NAMESPACE, self.namespace_exists),
            web.delete(_NAMESPACE, self.drop_namespace),
            web.get(_NAMESPACE + "/tables", self.list_tables, allow_head=False),
            web.post(_NAMESPACE + "/tables", self.create_table),
            web.get(_TABLE, self.load_table, allow_head=False),
            web.head(_TABLE, self.table_exists),
            web.post(_TABLE, self.commit_table),
            web.delete(_TABLE, self.drop_table),
            web.get(_TABLE + "/credentials", self.table_credentials, allow_head=False),
            web.post(_PREFIX + "/tables/rename", self.rename_table),
        ]

    async def _call(self, record: WarehouseRecord, operation: Callable[..., T], *args: Any) -> T:
        """Runs a SqlCatalog operation of the warehouse with pyiceberg's errors mapped."""
        catalog = self.state.catalogs.catalog(record)

        def run() -> T:
            with _iceberg_errors():
                return operation(catalog, *args)

        return await self.state.run(run)

    async def _warehouse(self, request: web.Request) -> WarehouseRecord:
        return await self.state.warehouse(request.match_info["prefix"], active=True)

    async def config(self, request: web.Request) -> web.Response:
        if not request.query.get("warehouse"):
            raise bad_request("WarehouseRequired", "the warehouse query parameter is required")
        name = check_warehouse_name(request.query["warehouse"])
        found = await self.state.run(self.state.store.by_name, project_of(request), name)
        await self.access.require_warehouse(request["principal"], found.id, READ)
        record = await self.state.warehouse(found.id, active=True)
        return web.json_response(
            {"defaults": {}, "overrides": {"prefix": record.id}, "endpoints": SUPPORTED_ENDPOINTS}
        )

    async def list_namespaces(self, request: web.Request) -> web.Response:
        record = await self._warehouse(request)
        parent = (
            tuple(request.query["parent"].split(NAMESPACE_SEPARATOR))
            if request.query.get("parent")
            else ()
        )
        namespaces = await self._call(record, lambda c: c.list_namespaces(parent))
        return self._page(request, "namespaces", sorted(list(n) for n in namespaces))

    async def create_namespace(self, request: web.Request) -> web.Response:
        record = await self._warehouse(request)
        body = await json_body(request)
        namespace, properties = body.get("namespace"), body.get("properties") or {}
        if (
            not isinstance(namespace, list)
            or not namespace
            or not all(isinstance(n, str) and n for n in namespace)
        ):
            raise bad_request("BadRequestException", "namespace must be a non-empty list of names")
        await self._call(record, lambda c: c.create_namespace(tuple(namespace), properties))
        return web.json_response({"namespace": namespace, "properties": properties})

    async def load_namespace(self, request: web.Request) -> web.Response:
        record, namespace = await self._warehouse(request), _namespace(request)
        properties = await self._call(record, lambda c: c.load_namespace_properties(namespace))
        properties = {k: v for k, v in properties.items() if k != "exists"}  # SqlCatalog's marker
        return web.json_response({"namespace": list(namespace), "properties": properties})

    async def namespace_exists(self, request: web.Request) -> web.Response:
        record, namespace = await self._warehouse(request), _namespace(request)
        exists = await self._call(record, lambda c: c.namespace_exists(namespace))
        return _exists_response(exists)

    async def drop_namespace(self, request: web.Request) -> web.Response:
        record, namespace = await self._warehouse(request), _namespace(request)
        await self._call(record, lambda c: c.drop_namespace(namespace))
        return web.Response(status=204)

    async def list_tables(self, request: web.Request) -> web.Response:
        record, namespace = await self._warehouse(request), _namespace(request)
        identifiers = await self._call(record, lambda c: c.list_tables(namespace))
        listed = [{"namespace": list(i[:-1]), "name": i[-1]} for i in sorted(identifiers)]
        return self._page(request, "identifiers", listed)

    async def create_table(self, request: web.Request) -> web.Response:
        record, namespace = await self._warehouse(request), _namespace(request)
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request("BadRequestException", "name is required")
        location = (
            body.get("location")
            or f"{record.profile.location}/{'/'.join(namespace)}/{name}-{uuid.uuid4().hex}"
        )
        if not record.profile.contains(location):
            raise bad_request(
                "BadRequestException", f"location {location} is outside the warehouse"
            )
        with _parsing("the table"):
            schema = Schema.model_validate(body.get("schema"))
            spec = (
                PartitionSpec.model_validate(body["partition-spec"])
                if body.get("partition-spec")
                else UNPARTITIONED_PARTITION_SPEC
            )
            order = (
                SortOrder.model_validate(body["write-order"])
                if body.get("write-order")
                else UNSORTED_SORT_ORDER
            )
        properties = dict(body.get("properties") or {})
        delegation = request.headers.get("X-Iceberg-Access-Delegation", "")
        if body.get("stage-create"):
            with _iceberg_errors():
                metadata = new_table_metadata(schema, spec, order, location, properties)
            extra = await self._table_config(request, record, location, delegation)
            return _load_result(None, metadata.model_dump_json(), extra)
        identifier = (*namespace, name)
        table = await self._call(
            record,
            lambda c: c.create_table(identifier, schema, location, spec, order, properties),
        )
        return await self._table_result(request, record, table, delegation)

    async def _table_config(
        self, request: web.Request, record: WarehouseRecord, location: str, delegation: str
    ) -> dict[str, Any]:
        """A table's config and vended credentials, which write only for a caller who may."""
        writable = await self.access.may_write(request["principal"], record.id)
        return await self.state.run(
            partial(self.state.catalogs.table_config, writable=writable),
            record,
            location,
            delegation,
        )

    async def _table_result(
        self, request: web.Request, record: WarehouseRecord, table: Table, delegation: str
    ) -> web.Response:
        extra = await self._table_config(request, record, table.location(), delegation)
        return _load_result(table.metadata_location, table.metadata.model_dump_json(), extra)

    async def load_table(self, request: web.Request) -> web.Response:
        record, identifier = await self._warehouse(request), _table(request)
        table = await self._call(record, lambda c: c.load_table(identifier))
        return await self._table_result(
            request, record, table, request.headers.get("X-Iceberg-Access-Delegation", "")
        )

    async def table_exists(self, request: web.Request) -> web.Response:
        record, identifier = await self._warehouse(request), _table(request)
        exists = await self._call(record, lambda c: c.table_exists(identifier))
        return _exists_response(exists)

    async def commit_table(self, request: web.Request) -> web.Response:
        record, identifier = await self._warehouse(request), _table(request)
        body = await json_body(request)
        body.setdefault("identifier", {"namespace": list(identifier[:-1]), "name": identifier[-1]})
        with _parsing("the commit"):
            commit = CommitTableRequest.model_validate(body)
        creates = any(isinstance(r, AssertCreate) for r in commit.requirements)

        def apply(catalog: SqlCatalog) -> CommitTableResponse:
            if not creates and not catalog.table_exists(identifier):
                raise NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
            try:
                return catalog.commit_table(
                    cast(Table, _Named(identifier)), commit.requirements, commit.updates
                )
            except (ResolveError, KeyError, IndexError, TypeError, StopIteration) as exc:
                # pyiceberg applies the updates as it finds them; any it cannot apply (a
                # schema or field that is not there) is the request's fault.
                raise ValueError(f"the updates cannot be applied: {exc!r}") from exc

        response = await self._call(record, apply)
        return web.json_response(
            {
                "metadata-location": response.metadata_location,
                "metadata": json.loads(response.metadata.model_dump_json()),
            }
        )

    async def drop_table(self, request: web.Request) -> web.Response:
        record, identifier = await self._warehouse(request), _table(request)
        if request.query.get("purgeRequested", "false").lower() == "true":
            table = await self._call(record, lambda c: c.load_table(identifier))
            await self._call(record, lambda c: c.purge_table(identifier))
            # Files written but never committed are not in the metadata; remove them too.
            credential = self.state.catalogs.credential(record)
            await self.state.run(
                delete_prefix, record.profile, credential, self.state.guard, table.location()
            )
        else:
            await self._call(record, lambda c: c.drop_table(identifier))
        return web.Response(status=204)

    async def table_credentials(self, request: web.Request) -> web.Response:
        record, identifier = await self._warehouse(request), _table(request)
        table = await self._call(record, lambda c: c.load_table(identifier))
        extra = await self._table_config(request, record, table.location(), "vended-credentials")
        return web.json_response({"storage-credentials": extra["storage-credentials"]})

    async def rename_table(self, request: web.Request) -> web.Response:
        record = await self._warehouse(request)
        body = await json_body(request)
        old, new = _identifier(body, "source"), _identifier(body, "destination")
        await self._call(record, lambda c: c.rename_table(old, new))
        return web.Response(status=204)
