"""CatalogTables, the registry's one interface to a warehouse's tables, against each backend:
the REST catalog (CatalogClient on the development catalog) and global-sql's SQL catalog
(SqlCatalogTables on SQLite), both on the stack's S3 endpoint.

Every test makes its namespaces and tables with pyiceberg's own client of the backend, then
works on them through the interface alone, and expects the same answers from both.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from catalog_map.platform import SqlWarehouse
from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from tests.integration.catalog_client import create_warehouse, rest_catalog
from tests.integration.executions import bucket_keys
from warehouse_service import wiring
from warehouse_service.catalog.sql_catalog_tables import SqlCatalogTables
from warehouse_service.catalog.tables import CatalogError, CatalogTables, Namespace
from warehouse_service.settings import WarehouseServiceSettings

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType())
)
PROPERTIES = {"owner": "catalog-tables"}


@dataclass(frozen=True)
class Backend:
    """A backend of the interface, the warehouse it serves, and pyiceberg's client of it."""

    tables: CatalogTables
    warehouse: str
    pyiceberg: Catalog
    bucket: str


def s3_properties(grant: BucketGrant) -> dict[str, str]:
    """pyiceberg's storage properties for the bucket, with its own key."""
    return {
        "s3.endpoint": grant.endpoint,
        "s3.region": grant.region,
        "s3.access-key-id": grant.access_key.access_key_id,
        "s3.secret-access-key": grant.access_key.secret_access_key,
        "s3.path-style-access": "true",
    }


@pytest.fixture(scope="module")
async def rest_backend(stack: Stack) -> AsyncIterator[Backend]:
    """A warehouse of the development catalog, through the registry's own catalog client."""
    grant = stack.provision_bucket("catalog-tables-rest")
    name = f"tables-{uuid.uuid4().hex[:8]}"
    created = create_warehouse(stack, grant, name)
    assert created.status_code == 201, created.text
    settings = dataclasses.replace(
        WarehouseServiceSettings(),
        catalog_uri=f"{stack.catalog_url}/catalog",
        catalog_management_uri=f"{stack.catalog_url}/management",
        catalog_token_uri=f"{stack.catalog_url}/oauth2/token",
        catalog_client_secret=stack.secrets.catalog_client_secret,
    )
    client = wiring.catalog_client(settings)
    await client.open()
    try:
        yield Backend(client, name, rest_catalog(stack, name), grant.bucket)
    finally:
        await client.close()


@pytest.fixture(scope="module")
def sql_backend(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """A SQL catalog on SQLite whose tables lie in a bucket, as global-sql's platform
    warehouse."""
    grant = stack.provision_bucket("catalog-tables-sql")
    database: Path = tmp_path_factory.mktemp("sql-catalog") / "catalog.db"
    warehouse = SqlWarehouse(
        f"sqlite:///{database}", f"s3://{grant.bucket}/lake", s3_properties(grant)
    )
    name = "texera-platform"
    pyiceberg = SqlCatalog(
        name,
        uri=warehouse.uri,
        warehouse=warehouse.warehouse_location,
        **warehouse.file_io_properties,
    )
    return Backend(SqlCatalogTables(warehouse), name, pyiceberg, grant.bucket)


@pytest.fixture(params=["rest", "sql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.getfixturevalue(f"{request.param}_backend")
    return chosen


@pytest.fixture
async def prefix(backend: Backend) -> str:
    return await backend.tables.prefix(backend.warehouse)


@pytest.fixture
def namespace(backend: Backend) -> Namespace:
    """A new namespace of the backend's warehouse."""
    made = (f"ns_{uuid.uuid4().hex[:8]}",)
    backend.pyiceberg.create_namespace(made)
    return made


def make_table(backend: Backend, namespace: Namespace) -> Table:
    """Table t of the namespace: two columns, PROPERTIES and one row appended."""
    table = backend.pyiceberg.create_table((*namespace, "t"), SCHEMA, properties=PROPERTIES)
    table.append(pa.table({"id": [1], "name": ["one"]}, schema=SCHEMA.as_arrow()))
    return table


async def refusal(call: Awaitable[object]) -> CatalogError:
    """The CatalogError an awaited call raises."""
    with pytest.raises(CatalogError) as refused:
        await call
    return refused.value


async def test_the_prefix_addresses_the_warehouse(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    assert namespace in await backend.tables.namespaces(prefix)
    assert await backend.tables.tables(prefix, namespace) == []


async def test_namespaces_come_children_before_parents(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    child = (*namespace, "inner")
    backend.pyiceberg.create_namespace(child)
    listed = await backend.tables.namespaces(prefix)
    assert listed.index(child) < listed.index(namespace)
    assert await backend.tables.namespaces(prefix, namespace) == [child]


async def test_a_table_is_listed_and_loaded(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    table = make_table(backend, namespace)
    assert await backend.tables.tables(prefix, namespace) == ["t"]
    loaded = await backend.tables.load_table(prefix, namespace, "t")
    metadata = loaded["metadata"]
    assert loaded["metadata-location"] == table.metadata_location
    assert metadata["properties"]["owner"] == PROPERTIES["owner"]
    [schema] = [s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"]]
    assert [(f["id"], f["name"], f["type"], f["required"]) for f in schema["fields"]] == [
        (1, "id", "long", True),
        (2, "name", "string", False),
    ]
    assert metadata["location"].startswith(f"s3://{backend.bucket}/")
    assert "config" in loaded


async def test_what_is_not_there_is_404(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    missing_table = await refusal(backend.tables.load_table(prefix, namespace, "missing"))
    assert (missing_table.status, missing_table.error_type) == (404, "NoSuchTableException")
    missing_namespace = await refusal(backend.tables.tables(prefix, ("no_such_namespace",)))
    assert (missing_namespace.status, missing_namespace.error_type) == (
        404,
        "NoSuchNamespaceException",
    )


async def test_a_commit_applies_its_updates(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    make_table(backend, namespace)
    before = await backend.tables.load_table(prefix, namespace, "t")
    commit = {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": before["metadata"]["table-uuid"]},
            {"type": "assert-current-schema-id", "current-schema-id": 0},
        ],
        "updates": [{"action": "set-properties", "updates": {"stage": "tidied"}}],
    }
    committed = await backend.tables.commit_table(prefix, namespace, "t", commit)
    assert committed["metadata"]["properties"]["stage"] == "tidied"
    assert committed["metadata-location"] != before["metadata-location"]
    reloaded = backend.pyiceberg.load_table((*namespace, "t"))
    assert reloaded.metadata_location == committed["metadata-location"]
    assert reloaded.properties["stage"] == "tidied"


@pytest.mark.parametrize(
    "requirement",
    [
        {"type": "assert-current-schema-id", "current-schema-id": 7},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1},
    ],
    ids=["schema", "snapshot"],
)
async def test_a_failed_requirement_is_409_and_changes_nothing(
    backend: Backend, prefix: str, namespace: Namespace, requirement: dict[str, Any]
) -> None:
    make_table(backend, namespace)
    commit = {
        "requirements": [requirement],
        "updates": [{"action": "set-properties", "updates": {"stage": "tidied"}}],
    }
    failed = await refusal(backend.tables.commit_table(prefix, namespace, "t", commit))
    assert (failed.status, failed.error_type) == (409, "CommitFailedException")
    assert "stage" not in backend.pyiceberg.load_table((*namespace, "t")).properties


async def test_a_commit_of_no_known_update_is_400(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    make_table(backend, namespace)
    commit = {"requirements": [], "updates": [{"action": "no-such-update"}]}
    refused = await refusal(backend.tables.commit_table(prefix, namespace, "t", commit))
    assert (refused.status, refused.error_type) == (400, "BadRequestException")


async def test_a_dropped_table_is_gone_with_its_files(
    stack: Stack, backend: Backend, prefix: str, namespace: Namespace
) -> None:
    location = make_table(backend, namespace).location()
    folder = location.removeprefix(f"s3://{backend.bucket}/") + "/"

    def files() -> list[str]:
        """The objects under the table's location, less the folder markers pyarrow leaves."""
        keys = bucket_keys(stack, backend.bucket)
        return [key for key in keys if key.startswith(folder) and not key.endswith("/")]

    assert files()
    await backend.tables.drop_table(prefix, namespace, "t")
    gone = await refusal(backend.tables.load_table(prefix, namespace, "t"))
    assert gone.status == 404
    assert await backend.tables.tables(prefix, namespace) == []
    assert files() == []


async def test_an_empty_namespace_is_dropped_and_a_full_one_refused(
    backend: Backend, prefix: str, namespace: Namespace
) -> None:
    make_table(backend, namespace)
    full = await refusal(backend.tables.drop_namespace(prefix, namespace))
    assert (full.status, full.error_type) == (409, "NamespaceNotEmptyException")
    await backend.tables.drop_table(prefix, namespace, "t")
    await backend.tables.drop_namespace(prefix, namespace)
    assert namespace not in await backend.tables.namespaces(prefix)
    again = await refusal(backend.tables.drop_namespace(prefix, namespace))
    assert again.status == 404
