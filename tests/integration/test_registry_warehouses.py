"""WarehouseService on the real registry, PostgreSQL, development catalog and S3 endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pyarrow as pa
import pytest
import requests

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from tests.conftest import catalog_traffic
from tests.integration.catalog_client import management, rest_catalog
from tests.integration.mesh import (
    RegistryClient,
    bad_fields,
    create_request,
    create_warehouse,
    credentials,
    reason,
    record_unit,
    refused,
    registry_as,
    user,
)
from texera.lake.internal.v1 import registry_service_pb2_grpc
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2, warehouse_service_pb2_grpc

pytestmark = pytest.mark.integration

ws = warehouse_service_pb2


@pytest.fixture
def alice(stack: Stack) -> RegistryClient:
    return user(stack, f"alice-{uuid.uuid4().hex[:6]}")


@pytest.fixture
def grant(stack: Stack) -> BucketGrant:
    return stack.provision_bucket("alice")


def test_create_get_and_list(alice: RegistryClient, grant: BucketGrant, stack: Stack) -> None:
    created = create_warehouse(alice, grant, name="lab results")
    assert created.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE
    assert created.owner_user_id == alice.subject
    assert created.credential_version == 1
    assert created.storage.bucket == grant.bucket
    assert created.catalog_warehouse_name == f"texera-{created.warehouse_id}"
    # The catalog has it, with the same id the registry recorded.
    catalog_record = management(stack, "GET", f"/warehouse/{created.catalog_warehouse_id}").json()
    assert catalog_record["name"] == created.catalog_warehouse_name

    got = alice.call(
        alice.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=created.warehouse_id)
    )
    assert got.warehouse == created
    listed = alice.call(alice.warehouses.ListWarehouses, ws.ListWarehousesRequest())
    assert [w.warehouse_id for w in listed.warehouses] == [created.warehouse_id]


def test_list_pages_through_every_warehouse_once(alice: RegistryClient, grant: BucketGrant) -> None:
    created = [create_warehouse(alice, grant, key_prefix=f"p{i}").warehouse_id for i in range(5)]
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = alice.call(
            alice.warehouses.ListWarehouses, ws.ListWarehousesRequest(page_size=2, page_token=token)
        )
        seen += [w.warehouse_id for w in page.warehouses]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == created
    assert pages == 3


def test_create_with_a_request_id_is_idempotent(
    alice: RegistryClient, grant: BucketGrant, stack: Stack
) -> None:
    request_id = str(uuid.uuid4())
    first = create_warehouse(alice, grant, request_id=request_id)
    again = create_warehouse(alice, grant, request_id=request_id)
    assert again == first
    error = refused(
        lambda: create_warehouse(alice, grant, request_id=request_id, key_prefix="other")
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"request_id"}
    names = [w["name"] for w in management(stack, "GET", "/warehouse").json()["warehouses"]]
    assert names.count(first.catalog_warehouse_name) == 1


def test_rotation_bumps_the_version_once_per_request_id(
    alice: RegistryClient, stack: Stack
) -> None:
    grant = stack.provision_bucket("rotor")
    warehouse = create_warehouse(alice, grant)
    iam = stack.s3.admin_iam()
    new_key = iam.create_access_key(UserName=f"{grant.bucket}-owner")["AccessKey"]
    request = ws.RotateWarehouseCredentialsRequest(
        warehouse_id=warehouse.warehouse_id,
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=new_key["AccessKeyId"], secret_access_key=new_key["SecretAccessKey"]
        ),
        request_id=str(uuid.uuid4()),
    )
    rotated = alice.call(alice.warehouses.RotateWarehouseCredentials, request)
    again = alice.call(alice.warehouses.RotateWarehouseCredentials, request)
    assert rotated.warehouse.credential_version == again.warehouse.credential_version == 2

    # The old key goes; the catalog now reaches the bucket with the new one.
    iam.delete_access_key(
        UserName=f"{grant.bucket}-owner", AccessKeyId=grant.access_key.access_key_id
    )
    catalog = rest_catalog(stack, warehouse.catalog_warehouse_name)
    catalog.create_namespace("results")
    catalog.create_table("results.after_rotation", schema=pa.schema([("id", pa.int64())]))


def test_rotation_with_credentials_the_storage_refuses(
    alice: RegistryClient, grant: BucketGrant
) -> None:
    warehouse = create_warehouse(alice, grant)
    error = refused(
        lambda: alice.call(
            alice.warehouses.RotateWarehouseCredentials,
            ws.RotateWarehouseCredentialsRequest(
                warehouse_id=warehouse.warehouse_id,
                credentials=credentials(grant, secret="wrong-secret"),
            ),
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"credentials"}
    got = alice.call(
        alice.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    )
    assert got.warehouse.credential_version == 1


def test_archive_and_restore_are_idempotent(alice: RegistryClient, grant: BucketGrant) -> None:
    warehouse_id = create_warehouse(alice, grant).warehouse_id
    archive = ws.ArchiveWarehouseRequest(warehouse_id=warehouse_id)
    restore = ws.RestoreWarehouseRequest(warehouse_id=warehouse_id)
    for _ in range(2):
        assert alice.call(alice.warehouses.ArchiveWarehouse, archive).warehouse.state == (
            warehouse_pb2.WAREHOUSE_STATE_ARCHIVED
        )
    for _ in range(2):
        assert alice.call(alice.warehouses.RestoreWarehouse, restore).warehouse.state == (
            warehouse_pb2.WAREHOUSE_STATE_ACTIVE
        )


def test_archive_and_restore_leave_the_catalogs_warehouse_open(
    alice: RegistryClient, grant: BucketGrant, stack: Stack
) -> None:
    """Archived results stay readable, so the catalog's warehouse stays active (Lakekeeper
    answers nothing on an inactive one); archiving needs no catalog at all."""
    warehouse = create_warehouse(alice, grant)
    both = [("warehouseStatus", "active"), ("warehouseStatus", "inactive")]
    [catalog_id] = [
        w["id"]
        for w in management(stack, "GET", "/warehouse", params=both).json()["warehouses"]
        if w["name"] == warehouse.catalog_warehouse_name
    ]
    fault = f"{stack.catalog_url}/dev/v1/warehouse/{catalog_id}/fault"
    archive = ws.ArchiveWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    restore = ws.RestoreWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    requests.put(fault, json={"fail-status": 503}, timeout=10).raise_for_status()
    try:
        archived = alice.call(alice.warehouses.ArchiveWarehouse, archive).warehouse
        assert archived.state == warehouse_pb2.WAREHOUSE_STATE_ARCHIVED
        restored = alice.call(alice.warehouses.RestoreWarehouse, restore).warehouse
        assert restored.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE
    finally:
        requests.delete(fault, timeout=10).raise_for_status()
    alice.call(alice.warehouses.ArchiveWarehouse, archive)
    status = management(stack, "GET", f"/warehouse/{catalog_id}").json()["status"]
    assert status == "active"


def test_delete_refuses_a_warehouse_with_tables_unless_purged(
    alice: RegistryClient, grant: BucketGrant, stack: Stack
) -> None:
    warehouse = create_warehouse(alice, grant)
    catalog = rest_catalog(stack, warehouse.catalog_warehouse_name)
    catalog.create_namespace("results")
    table = catalog.create_table("results.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))

    error = refused(
        lambda: alice.call(
            alice.warehouses.DeleteWarehouse,
            ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id),
        )
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "purge" in (error.details() or "")

    deleted = alice.call(
        alice.warehouses.DeleteWarehouse,
        ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id, purge=True),
    )
    assert deleted.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_DELETED
    assert (
        management(stack, "GET", f"/warehouse/{warehouse.catalog_warehouse_id}").status_code == 404
    )
    # Before it dropped anything, the purge made the catalog's deletes hard (Lakekeeper's soft
    # ones would keep the tables, and the warehouse, for a while).
    profiles = [
        json.loads(line)["request"]["body"]
        for line in catalog_traffic(stack.state_dir).read_text().splitlines()
        if f"/warehouse/{warehouse.catalog_warehouse_id}/delete-profile" in line
    ]
    assert profiles == [{"delete-profile": {"type": "hard"}}]
    assert stack.s3.admin_s3().list_objects_v2(Bucket=grant.bucket).get("KeyCount", 0) == 0
    # Gone from the default list, still visible as a tombstone when asked for.
    listed = alice.call(alice.warehouses.ListWarehouses, ws.ListWarehousesRequest())
    assert warehouse.warehouse_id not in [w.warehouse_id for w in listed.warehouses]
    tombstones = alice.call(
        alice.warehouses.ListWarehouses,
        ws.ListWarehousesRequest(states=[warehouse_pb2.WAREHOUSE_STATE_DELETED]),
    )
    assert [w.warehouse_id for w in tombstones.warehouses] == [warehouse.warehouse_id]
    again = refused(
        lambda: alice.call(
            alice.warehouses.DeleteWarehouse,
            ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id),
        )
    )
    assert again.code() == grpc.StatusCode.NOT_FOUND


def test_delete_of_a_warehouse_without_tables_needs_no_purge(
    alice: RegistryClient, grant: BucketGrant, stack: Stack
) -> None:
    warehouse = create_warehouse(alice, grant)
    rest_catalog(stack, warehouse.catalog_warehouse_name).create_namespace(
        "results"
    )  # empty namespace
    deleted = alice.call(
        alice.warehouses.DeleteWarehouse,
        ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id),
    )
    assert deleted.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_DELETED

    # A repeated delete is NOT_FOUND, unless it allows the warehouse to be missing (AIP-135).
    again = ws.DeleteWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    missing = refused(lambda: alice.call(alice.warehouses.DeleteWarehouse, again))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert reason(missing) == "WAREHOUSE_NOT_FOUND"
    again.allow_missing = True
    repeated = alice.call(alice.warehouses.DeleteWarehouse, again)
    assert repeated.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_DELETED
    never = ws.DeleteWarehouseRequest(warehouse_id=str(uuid.uuid4()), allow_missing=True)
    assert not alice.call(alice.warehouses.DeleteWarehouse, never).HasField("warehouse")


@pytest.mark.parametrize(
    ("change", "code", "fields"),
    [
        ({"secret": "not-the-secret"}, grpc.StatusCode.INVALID_ARGUMENT, {"credentials"}),
        ({"bucket": "someone-elses-bucket"}, grpc.StatusCode.INVALID_ARGUMENT, {"credentials"}),
        ({"endpoint": "http://127.0.0.1:9"}, grpc.StatusCode.FAILED_PRECONDITION, set()),
    ],
    ids=["wrong secret", "bucket not granted", "unreachable endpoint"],
)
def test_storage_the_catalog_refuses_leaves_no_row(
    alice: RegistryClient,
    grant: BucketGrant,
    change: dict[str, str],
    code: grpc.StatusCode,
    fields: set[str],
) -> None:
    request = create_request(grant, secret=change.get("secret"))
    if "bucket" in change:
        request.warehouse.storage.bucket = change["bucket"]
    if "endpoint" in change:
        request.warehouse.storage.endpoint = change["endpoint"]
    error = refused(lambda: alice.call(alice.warehouses.CreateWarehouse, request))
    assert error.code() == code
    if fields:
        assert bad_fields(error) == fields
    assert "not-the-secret" not in (error.details() or "")
    assert not alice.call(alice.warehouses.ListWarehouses, ws.ListWarehousesRequest()).warehouses


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:9000",
        "http://localhost.:9000",
        "http://2130706433:9000",
        "http://0177.0.0.1:9000",
        "http://0x7f.0.0.1:9000",
        "http://[::1]:9000",
        "http://[::ffff:127.0.0.1]:9000",
        "http://0.0.0.0:9000",
        "http://10.1.2.3:9000",
        "http://100.64.0.1:9000",
        "http://169.254.169.254",
        "http://[fd00:ec2::254]",
        "http://metadata.google.internal",
    ],
)
def test_endpoints_inside_the_platform_are_refused(
    alice: RegistryClient, grant: BucketGrant, endpoint: str
) -> None:
    request = create_request(grant)
    request.warehouse.storage.endpoint = endpoint
    error = refused(lambda: alice.call(alice.warehouses.CreateWarehouse, request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"warehouse.storage.endpoint"}
    assert not alice.call(alice.warehouses.ListWarehouses, ws.ListWarehousesRequest()).warehouses


def test_only_the_allowed_spelling_of_an_internal_endpoint_passes(
    alice: RegistryClient, stack: Stack
) -> None:
    grant = stack.provision_bucket("spelling")  # its endpoint is allowed: http://127.0.0.1:<port>
    request = create_request(grant)
    request.warehouse.storage.endpoint = f"http://localhost:{stack.ports.s3}"
    error = refused(lambda: alice.call(alice.warehouses.CreateWarehouse, request))
    assert bad_fields(error) == {"warehouse.storage.endpoint"}
    assert create_warehouse(alice, grant).storage.endpoint == grant.endpoint


def test_rotation_rechecks_the_stored_endpoint(alice: RegistryClient, stack: Stack) -> None:
    grant = stack.provision_bucket("recheck")
    warehouse = create_warehouse(alice, grant)
    # A registry whose operator no longer allows the stack's own (loopback) endpoint.
    stack.start_part(
        "strict-registry",
        "warehouse_service",
        {"TEXERA_LAKE_WAREHOUSE_ALLOWED_STORAGE_ENDPOINTS": ""},
    )
    channel = stack.channel("strict-registry")
    strict = RegistryClient(
        alice.stack,
        alice.subject,
        warehouse_service_pb2_grpc.WarehouseServiceStub(channel),
        registry_service_pb2_grpc.ExecutionLedgerServiceStub(channel),
        registry_service_pb2_grpc.UnitLeaseServiceStub(channel),
        registry_service_pb2_grpc.ExecutionCredentialServiceStub(channel),
        alice.metadata,
    )
    rotate = ws.RotateWarehouseCredentialsRequest(
        warehouse_id=warehouse.warehouse_id, credentials=credentials(grant)
    )
    try:
        error = refused(lambda: strict.call(strict.warehouses.RotateWarehouseCredentials, rotate))
    finally:  # its cleaner would refuse the stack's own storage for every other test
        channel.close()
        stack.stop_part("strict-registry")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"warehouse.storage.endpoint"}
    got = alice.call(
        alice.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    )
    assert got.warehouse.credential_version == 1


def test_overlapping_storage_is_already_exists(alice: RegistryClient, grant: BucketGrant) -> None:
    create_warehouse(alice, grant, key_prefix="team")
    error = refused(lambda: create_warehouse(alice, grant, key_prefix="team/sub"))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS


def _bad_create(**fields: Any) -> ws.CreateWarehouseRequest:
    request = ws.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name="ok",
            storage=warehouse_pb2.S3StorageProfile(bucket="good-bucket", region="us-east-1"),
        ),
        credentials=warehouse_pb2.S3Credentials(access_key_id="AKIAEXAMPLE", secret_access_key="s"),
    )
    for path, value in fields.items():
        target: Any = request
        *parents, leaf = path.split(".")
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)
    return request


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        (
            ws.CreateWarehouseRequest(),
            {"warehouse.display_name", "warehouse.storage", "credentials"},
        ),
        (_bad_create(**{"warehouse.storage.bucket": "Bad_Bucket"}), {"warehouse.storage.bucket"}),
        (_bad_create(**{"warehouse.storage.bucket": "192.168.1.1"}), {"warehouse.storage.bucket"}),
        (
            _bad_create(**{"warehouse.storage.key_prefix": "a/../b"}),
            {"warehouse.storage.key_prefix"},
        ),
        (_bad_create(**{"warehouse.storage.key_prefix": "/abs"}), {"warehouse.storage.key_prefix"}),
        (
            _bad_create(**{"warehouse.storage.endpoint": "ftp://host"}),
            {"warehouse.storage.endpoint"},
        ),
        (
            _bad_create(**{"warehouse.storage.endpoint": "http://u:p@host"}),
            {"warehouse.storage.endpoint"},
        ),
        (_bad_create(**{"warehouse.storage.region": "US East"}), {"warehouse.storage.region"}),
        (
            _bad_create(**{"warehouse.storage.sts_role_arn": "role"}),
            {"warehouse.storage.sts_role_arn"},
        ),
        (_bad_create(**{"warehouse.display_name": "x" * 65}), {"warehouse.display_name"}),
        (_bad_create(**{"credentials.access_key_id": "a b"}), {"credentials.access_key_id"}),
        (_bad_create(request_id="not-a-uuid"), {"request_id"}),
    ],
    ids=[
        "empty",
        "bucket chars",
        "bucket ip",
        "prefix dotdot",
        "prefix absolute",
        "endpoint scheme",
        "endpoint credentials",
        "region",
        "role arn",
        "display name",
        "access key",
        "request id",
    ],
)
def test_create_names_every_bad_field(
    alice: RegistryClient, request_: Any, fields: set[str]
) -> None:
    error = refused(lambda: alice.call(alice.warehouses.CreateWarehouse, request_))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == fields


BAD_ID_CALLS: list[tuple[str, Callable[[RegistryClient], Any]]] = [
    (
        "GetWarehouse",
        lambda c: c.call(c.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id="x")),
    ),
    (
        "ArchiveWarehouse",
        lambda c: c.call(
            c.warehouses.ArchiveWarehouse, ws.ArchiveWarehouseRequest(warehouse_id="")
        ),
    ),
    (
        "RestoreWarehouse",
        lambda c: c.call(
            c.warehouses.RestoreWarehouse, ws.RestoreWarehouseRequest(warehouse_id="1")
        ),
    ),
    (
        "DeleteWarehouse",
        lambda c: c.call(c.warehouses.DeleteWarehouse, ws.DeleteWarehouseRequest(warehouse_id="z")),
    ),
    (
        "RotateWarehouseCredentials",
        lambda c: c.call(
            c.warehouses.RotateWarehouseCredentials,
            ws.RotateWarehouseCredentialsRequest(warehouse_id="x"),
        ),
    ),
]


@pytest.mark.parametrize(("method", "call"), BAD_ID_CALLS, ids=[m for m, _ in BAD_ID_CALLS])
def test_malformed_warehouse_ids_are_invalid_argument(
    alice: RegistryClient, method: str, call: Callable[[RegistryClient], Any]
) -> None:
    error = refused(lambda: call(alice))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "warehouse_id" in bad_fields(error)


def test_rotation_without_credentials_names_the_field(
    alice: RegistryClient, grant: BucketGrant
) -> None:
    warehouse_id = create_warehouse(alice, grant).warehouse_id
    error = refused(
        lambda: alice.call(
            alice.warehouses.RotateWarehouseCredentials,
            ws.RotateWarehouseCredentialsRequest(warehouse_id=warehouse_id),
        )
    )
    assert bad_fields(error) == {"credentials"}


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (ws.ListWarehousesRequest(page_size=-1), "page_size"),
        (ws.ListWarehousesRequest(page_token="forged"), "page_token"),
        (ws.ListWarehousesRequest(states=[42]), "states"),  # type: ignore[list-item]
    ],
    ids=["negative page size", "forged token", "unknown state"],
)
def test_list_names_bad_fields(alice: RegistryClient, request_: Any, field: str) -> None:
    error = refused(lambda: alice.call(alice.warehouses.ListWarehouses, request_))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {field}


def test_a_page_token_is_bound_to_its_request(alice: RegistryClient, grant: BucketGrant) -> None:
    for i in range(3):
        create_warehouse(alice, grant, key_prefix=f"t{i}")
    token = alice.call(
        alice.warehouses.ListWarehouses, ws.ListWarehousesRequest(page_size=1)
    ).next_page_token
    other_filter = ws.ListWarehousesRequest(
        page_token=token, states=[warehouse_pb2.WAREHOUSE_STATE_ARCHIVED]
    )
    error = refused(lambda: alice.call(alice.warehouses.ListWarehouses, other_filter))
    assert bad_fields(error) == {"page_token"}
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    error = refused(
        lambda: alice.call(
            alice.warehouses.ListWarehouses, ws.ListWarehousesRequest(page_token=tampered)
        )
    )
    assert bad_fields(error) == {"page_token"}


def test_the_public_api_refuses_service_tokens(stack: Stack) -> None:
    record_unit(stack, "cu-public", "unit-owner")
    # At the main port, where the public API is served (a unit's own calls go to the unit
    # port in TLS mode, which does not serve it at all).
    unit = registry_as(stack, "cu-public", stack.unit_credential("cu-public"))
    error = refused(lambda: unit.call(unit.warehouses.ListWarehouses, ws.ListWarehousesRequest()))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
