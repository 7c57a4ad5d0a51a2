"""The gateway's read-only Iceberg REST catalog, with real engines: pyiceberg's RestCatalog and
DuckDB's iceberg extension (loaded from its wheel's file) read a user's results with the user's
Texera token; a READER of the warehouse sees them, a stranger sees nothing, writes are refused,
and a failed execution's tables are not there."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import duckdb
import grpc
import pyarrow as pa
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from werkzeug.datastructures import ImmutableMultiDict

from embedded_stack.stack import Stack
from lake_tables.naming import CONSOLE_LOGS, RESULTS, RUNTIME_STATS, execution_table
from tests.integration.executions import udf, udf_workflow, workflow
from tests.integration.mesh import bad_fields, bearer, reason, refused, user
from tests.integration.people import Person, person
from tests.integration.test_catalog_conformance import SPECS
from texera.lake.v1 import (
    execution_pb2,
    iceberg_access_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2,
)
from texera.lake.v1 import iceberg_access_service_pb2 as ia

pytestmark = pytest.mark.integration

ROWS = 300


@pytest.fixture(autouse=True)
def _ca_bundles_from_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests takes REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) over a session's own CA bundle
    (psf/requests#3829), so pyiceberg's `ssl.cabundle` (below) holds only without them."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


def _catalog(stack: Stack, warehouse_id: str, **auth: str) -> RestCatalog:
    """pyiceberg's REST catalog on the gateway's endpoint, as a user's engine opens it."""
    tls: dict[str, Any] = {}
    if stack.tls is not None:
        tls["ssl"] = {"cabundle": str(stack.tls.ca_file)}
    return RestCatalog("texera", uri=stack.iceberg_rest_uri, warehouse=warehouse_id, **tls, **auth)


def _get(stack: Stack, path: str, token: str, **params: str) -> requests.Response:
    verify: str | bool = str(stack.tls.ca_file) if stack.tls is not None else True
    return requests.get(
        f"{stack.iceberg_rest_uri}/v1/{path}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        verify=verify,
        timeout=30,
    )


def _succeeded(owner: Person, flow: Any) -> execution_pb2.Execution:
    execution = owner.executions.finish(
        owner.executions.submit(owner.warehouse_id, flow).execution_id
    )
    assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, execution.error
    return execution


@dataclass(frozen=True)
class Alice:
    """A user with two succeeded executions (numbers and their squares) and a failed one."""

    person: Person
    numbers: execution_pb2.Execution
    squares: execution_pb2.Execution
    failed: execution_pb2.Execution


@pytest.fixture(scope="module")
def alice(stack: Stack) -> Alice:
    owner = person(stack, "iceberg-alice")
    numbers = _succeeded(
        owner, workflow([{"operator_id": "n", "range_source": {"end": ROWS}, "materialize": True}])
    )
    squares_code = (
        "def process(batches):\n"
        "    for batch in batches:\n"
        "        ids = batch.column('id').to_pylist()\n"
        "        yield pa.table({'id': ids, 'square': [i * i for i in ids]}).to_batches()[0]\n"
    )
    squares = _succeeded(
        owner,
        udf_workflow(
            "squares",
            udf("import pyarrow as pa\n" + squares_code, [("id", "bigint"), ("square", "bigint")]),
            end=ROWS,
        ),
    )
    failing = udf(
        "def process(batches):\n    raise ValueError('no')\n    yield", [("id", "bigint")]
    )
    failed = owner.executions.finish(
        owner.executions.submit(owner.warehouse_id, udf_workflow("broken", failing)).execution_id
    )
    assert failed.state == execution_pb2.EXECUTION_STATE_FAILED
    return Alice(owner, numbers, squares, failed)


def _table(execution: execution_pb2.Execution) -> str:
    [output] = execution.outputs
    return output.table_name


def test_pyiceberg_reads_a_result_equal_to_its_pages(stack: Stack, alice: Alice) -> None:
    owner, numbers = alice.person, alice.numbers
    catalog = _catalog(stack, owner.warehouse_id, token=stack.token(owner.user_id))
    assert (RESULTS,) in catalog.list_namespaces()
    assert (RESULTS, _table(numbers)) in catalog.list_tables(RESULTS)
    table = catalog.load_table((RESULTS, _table(numbers)))
    read = table.scan().to_arrow()
    rows, _ = owner.results.all_rows(numbers.execution_id, "n", page_size=1000)
    assert sorted(read.column("id").to_pylist()) == sorted(int(row["id"]) for row in rows)
    assert read.num_rows == ROWS


def test_an_engines_credential_setting_gets_its_token_from_the_endpoint(
    stack: Stack, alice: Alice
) -> None:
    owner, numbers = alice.person, alice.numbers
    catalog = _catalog(
        stack,
        owner.warehouse_id,
        credential=f"{owner.user_id}:{stack.token(owner.user_id)}",
        **{"oauth2-server-uri": f"{stack.iceberg_rest_uri}/v1/oauth/tokens"},
    )
    assert catalog.load_table((RESULTS, _table(numbers))).scan().to_arrow().num_rows == ROWS
    verify: str | bool = str(stack.tls.ca_file) if stack.tls is not None else True
    issued = requests.post(
        f"{stack.iceberg_rest_uri}/v1/oauth/tokens",
        data={
            "grant_type": "client_credentials",
            "client_id": "x",
            "client_secret": stack.token(owner.user_id),
        },
        verify=verify,
        timeout=30,
    ).json()
    assert issued["token_type"] == "bearer"
    assert 0 < issued["expires_in"] <= 3600
    assert issued["access_token"] != stack.token(owner.user_id)  # the catalog's own token
    assert _get(stack, f"{owner.warehouse_id}/namespaces", issued["access_token"]).ok
    forged = requests.post(
        f"{stack.iceberg_rest_uri}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "x", "client_secret": "forged"},
        verify=verify,
        timeout=30,
    )
    assert forged.status_code == 401
    assert forged.json()["error"] == "invalid_client"


def test_every_write_is_forbidden(stack: Stack, alice: Alice) -> None:
    owner, numbers = alice.person, alice.numbers
    catalog = _catalog(stack, owner.warehouse_id, token=stack.token(owner.user_id))
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    with pytest.raises(ForbiddenError):
        catalog.create_namespace("mine")
    with pytest.raises(ForbiddenError):
        catalog.create_table((RESULTS, "mine"), schema)
    with pytest.raises(ForbiddenError):
        catalog.drop_table((RESULTS, _table(numbers)))
    table = catalog.load_table((RESULTS, _table(numbers)))
    # An append writes its data file first: the read-only credentials the load vended refuse
    # it before the commit (which the catalog would refuse, 403) is even sent.
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        table.append(pa.table([pa.array([1], pa.int64())], schema=table.schema().as_arrow()))
    assert catalog.load_table((RESULTS, _table(numbers))).scan().to_arrow().num_rows == ROWS


def test_a_reader_sees_the_shared_warehouse_and_a_stranger_sees_nothing(
    stack: Stack, alice: Alice
) -> None:
    owner, numbers = alice.person, alice.numbers
    reader, stranger = f"reader-{owner.user_id}", f"stranger-{owner.user_id}"
    user(stack, owner.user_id).warehouses.ShareWarehouse(
        warehouse_service_pb2.ShareWarehouseRequest(
            warehouse_id=owner.warehouse_id,
            member=warehouse_pb2.WarehouseMember(
                user_id=reader, role=warehouse_pb2.WAREHOUSE_ROLE_READER
            ),
        ),
        metadata=user(stack, owner.user_id).metadata,
        timeout=60,
    )
    shared = _catalog(stack, owner.warehouse_id, token=stack.token(reader))
    assert shared.load_table((RESULTS, _table(numbers))).scan().to_arrow().num_rows == ROWS
    token = stack.token(stranger)
    warehouse = owner.warehouse_id
    paths = [
        ("config", {"warehouse": warehouse}),
        (f"{warehouse}/namespaces", {}),
        (f"{warehouse}/namespaces/{RESULTS}", {}),
        (f"{warehouse}/namespaces/{RESULTS}/tables", {}),
        (f"{warehouse}/namespaces/{RESULTS}/tables/{_table(numbers)}", {}),
        (f"{warehouse}/namespaces/{RESULTS}/tables/{_table(numbers)}/credentials", {}),
    ]
    for path, params in paths:
        assert _get(stack, path, token, **params).status_code == 404, path
    assert _get(stack, f"{warehouse}/namespaces", "not-a-token").status_code == 401


def test_a_failed_executions_tables_are_not_there(stack: Stack, alice: Alice) -> None:
    owner, numbers, failed = alice.person, alice.numbers, alice.failed
    catalog = _catalog(stack, owner.warehouse_id, token=stack.token(owner.user_id))
    for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
        names = {name for _, name in catalog.list_tables(namespace)}
        assert execution_table(numbers.execution_id) in names
        assert execution_table(failed.execution_id) not in names
        with pytest.raises(NoSuchTableError):
            catalog.load_table((namespace, execution_table(failed.execution_id)))


def _extension(name: str) -> str:
    """The file of a DuckDB extension its wheel installed (duckdb-ext-<name>)."""
    root = Path(duckdb.__file__).parent.parent / "duckdb_ext" / "extensions"
    [found] = root.glob(f"v{duckdb.__version__}/*/{name}.duckdb_extension")
    return str(found)


def test_duckdb_attaches_the_catalog_and_joins_two_results(stack: Stack, alice: Alice) -> None:
    owner, numbers, squares = alice.person, alice.numbers, alice.squares
    connection = duckdb.connect()
    for extension in ("httpfs", "avro", "iceberg"):
        connection.load_extension(_extension(extension))
    if stack.tls is not None:
        connection.execute(f"SET ca_cert_file = '{stack.tls.ca_file}'")
    connection.execute(f"CREATE SECRET lake (TYPE iceberg, TOKEN '{stack.token(owner.user_id)}')")
    connection.execute(
        f"ATTACH '{owner.warehouse_id}' AS lake "
        f"(TYPE iceberg, ENDPOINT '{stack.iceberg_rest_uri}', SECRET lake)"
    )
    joined = connection.execute(
        f'SELECT count(*), sum(s.square) FROM lake.{RESULTS}."{_table(numbers)}" n '
        f'JOIN lake.{RESULTS}."{_table(squares)}" s ON n.id = s.id'
    ).fetchone()
    assert joined == (ROWS, sum(i * i for i in range(ROWS)))


@pytest.mark.filterwarnings("ignore:Unsupported scheme type")
def test_the_endpoints_answers_follow_the_iceberg_rest_spec(stack: Stack, alice: Alice) -> None:
    owner, numbers = alice.person, alice.numbers
    token, stranger = stack.token(owner.user_id), stack.token(f"stranger-{owner.user_id}")
    warehouse, table = owner.warehouse_id, f"{RESULTS}/tables/{_table(numbers)}"
    verify: str | bool = str(stack.tls.ca_file) if stack.tls is not None else True
    calls: list[tuple[str, str, str, dict[str, str], bytes]] = [
        ("GET", "config", token, {"warehouse": warehouse}, b""),
        ("GET", f"{warehouse}/namespaces", token, {}, b""),
        ("GET", f"{warehouse}/namespaces/{RESULTS}", token, {}, b""),
        ("GET", f"{warehouse}/namespaces/{RESULTS}/tables", token, {}, b""),
        ("GET", f"{warehouse}/namespaces/{table}", token, {}, b""),
        ("GET", f"{warehouse}/namespaces/{table}/credentials", token, {}, b""),
        ("GET", f"{warehouse}/namespaces/{table}", stranger, {}, b""),
        ("GET", f"{warehouse}/namespaces/{RESULTS}/tables/nothing", token, {}, b""),
        ("DELETE", f"{warehouse}/namespaces/{table}", token, {}, b""),
        ("POST", f"{warehouse}/namespaces", token, {}, b'{"namespace": ["mine"]}'),
        ("GET", f"{warehouse}/namespaces", "not-a-token", {}, b""),
    ]
    spec = OpenAPI.from_file_path(str(SPECS / "iceberg-rest-catalog-open-api.yaml"))
    violations = []
    for method, path, bearer_token, params, body in calls:
        answer = requests.request(
            method,
            f"{stack.iceberg_rest_uri}/v1/{path}",
            params=params,
            data=body or None,
            headers={"Authorization": f"Bearer {bearer_token}", "Content-Type": "application/json"},
            verify=verify,
            timeout=30,
        )
        request = MockRequest(
            "http://localhost",
            method.lower(),
            f"/v1/{path}",
            args=ImmutableMultiDict(params),
            headers={"Authorization": "Bearer x"},
            data=body,
            content_type="application/json",
        )
        response = MockResponse(
            answer.content,
            status_code=answer.status_code,
            content_type=answer.headers.get("Content-Type", "").split(";")[0],
        )
        try:
            spec.validate_response(request, response)
        except Exception as exc:  # openapi-core's errors: anything it refuses is a violation
            violations.append(f"{method} {path} {answer.status_code}: {exc!r:.300}")
    assert violations == []


def _access(stack: Stack, user_id: str, execution_id: str) -> ia.GetIcebergAccessResponse:
    with stack.channel("gateway", presenting=None) as channel:
        return iceberg_access_service_pb2_grpc.IcebergAccessServiceStub(channel).GetIcebergAccess(
            ia.GetIcebergAccessRequest(execution_id=execution_id),
            metadata=bearer(stack.token(user_id)),
            timeout=30,
        )


def test_the_gateway_hands_out_where_an_executions_tables_are_and_a_token_for_them(
    stack: Stack, alice: Alice
) -> None:
    owner, squares = alice.person, alice.squares
    access = _access(stack, owner.user_id, squares.execution_id)
    assert access.catalog_uri == stack.iceberg_rest_uri
    assert access.warehouse == owner.warehouse_id
    kinds = {table.kind: table for table in access.tables}
    assert set(kinds) == {
        ia.ICEBERG_TABLE_KIND_RESULT,
        ia.ICEBERG_TABLE_KIND_RUNTIME_STATISTICS,
        ia.ICEBERG_TABLE_KIND_CONSOLE_MESSAGES,
    }
    result = kinds[ia.ICEBERG_TABLE_KIND_RESULT]
    assert (result.operator_id, result.namespace, result.name) == (
        "squares",
        RESULTS,
        _table(squares),
    )
    left = access.token_expire_time.ToSeconds() - time.time()
    assert 0 < left <= 3600
    catalog = _catalog(stack, access.warehouse, token=access.token)
    read = catalog.load_table((result.namespace, result.name)).scan().to_arrow()
    assert sorted(read.column("square").to_pylist()) == sorted(i * i for i in range(ROWS))
    # The token is the catalog's alone: the gateway's gRPC port refuses it.
    with stack.channel("gateway", presenting=None) as channel:
        stub = iceberg_access_service_pb2_grpc.IcebergAccessServiceStub(channel)
        error = refused(
            lambda: stub.GetIcebergAccess(
                ia.GetIcebergAccessRequest(execution_id=squares.execution_id),
                metadata=bearer(access.token),
                timeout=30,
            )
        )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_no_access_to_a_failed_execution_nor_to_a_strangers(stack: Stack, alice: Alice) -> None:
    owner = alice.person
    error = refused(lambda: _access(stack, owner.user_id, alice.failed.execution_id))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(error) == "EXECUTION_NOT_READABLE"
    error = refused(lambda: _access(stack, f"stranger-{owner.user_id}", alice.numbers.execution_id))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_a_load_vends_credentials_that_read_the_table_and_write_nothing(
    stack: Stack, alice: Alice
) -> None:
    owner, numbers = alice.person, alice.numbers
    answer = _get(
        stack,
        f"{owner.warehouse_id}/namespaces/{RESULTS}/tables/{_table(numbers)}",
        stack.token(owner.user_id),
    )
    loaded = answer.json()
    config = loaded["config"]
    assert config["s3.access-key-id"].startswith("ASIA")  # temporary, vended for this load
    storage = boto3.client(
        "s3",
        endpoint_url=config["s3.endpoint"],
        region_name=config.get("s3.region", "us-east-1"),
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket, _, metadata_key = loaded["metadata-location"].removeprefix("s3://").partition("/")
    assert storage.get_object(Bucket=bucket, Key=metadata_key)["Body"].read()
    writes: list[Callable[[], object]] = [
        lambda: storage.put_object(Bucket=bucket, Key=f"{metadata_key}.forged", Body=b"x"),
        lambda: storage.delete_object(Bucket=bucket, Key=metadata_key),
    ]
    for write in writes:
        with pytest.raises(ClientError) as refused_write:
            write()
        assert refused_write.value.response["Error"]["Code"] == "AccessDenied"


@pytest.mark.parametrize("execution_id", ["", "not an id!", "x" * 65])
def test_a_malformed_execution_id_is_invalid_argument_naming_it(
    stack: Stack, execution_id: str
) -> None:
    error = refused(lambda: _access(stack, "iceberg-malformed", execution_id))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"execution_id"}
