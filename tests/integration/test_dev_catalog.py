"""The development catalog against pyiceberg's RestCatalog, the S3 endpoint and PostgreSQL."""

from __future__ import annotations

import secrets
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException

from embedded_stack.postgres import bin_dir
from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack
from tests.integration.catalog_client import (
    admin_headers,
    create_warehouse,
    management,
    rest_catalog,
    warehouse_request,
)

pytestmark = pytest.mark.integration

#: pyiceberg retries failed commits by itself; these tests show the conflicts instead.
NO_CLIENT_RETRIES = {"commit.retry.num-retries": "0"}
ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"row-{i}" for i in ids]}, schema=ROWS)


@pytest.fixture
def grant(stack: Stack) -> BucketGrant:
    return stack.provision_bucket("alice")


@pytest.fixture
def warehouse(stack: Stack, grant: BucketGrant) -> str:
    name = f"wh-{uuid.uuid4().hex[:8]}"
    response = create_warehouse(stack, grant, name)
    assert response.status_code == 201, response.text
    return name


def test_pyiceberg_round_trip_with_vended_credentials(
    stack: Stack, grant: BucketGrant, warehouse: str
) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("results")
    table = catalog.create_table("results.people", schema=ROWS)
    table.append(_rows(1, 2))
    table.append(_rows(3))

    reloaded = catalog.load_table("results.people")
    assert sorted(reloaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert len(reloaded.snapshots()) == 2
    # The client works with short-lived credentials, never the warehouse's own key.
    vended_key = reloaded.io.properties["s3.access-key-id"]
    assert vended_key != grant.access_key.access_key_id
    assert reloaded.io.properties["s3.session-token"]
    assert grant.access_key.secret_access_key not in reloaded.io.properties.values()


def test_load_table_carries_credentials_and_their_expiry_only_when_asked(
    stack: Stack, warehouse: str
) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("results")
    catalog.create_table("results.t", schema=ROWS)
    admin = admin_headers(stack)
    prefix = requests.get(
        f"{stack.catalog_url}/catalog/v1/config",
        params={"warehouse": warehouse},
        headers=admin,
        timeout=30,
    ).json()["overrides"]["prefix"]
    url = f"{stack.catalog_url}/catalog/v1/{prefix}/namespaces/results/tables/t"

    vended = requests.get(
        url, headers={**admin, "X-Iceberg-Access-Delegation": "vended-credentials"}, timeout=30
    ).json()
    config = vended["config"]
    for key in (
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.endpoint",
        "s3.region",
    ):
        assert config[key]
    assert config["s3.path-style-access"] == "true"
    [storage_credential] = vended["storage-credentials"]
    assert vended["metadata"]["location"].startswith(storage_credential["prefix"])
    expires_at = int(storage_credential["config"]["s3.session-token-expires-at-ms"]) / 1000
    assert time.time() < expires_at <= time.time() + 3600 + 5

    plain = requests.get(url, headers=admin, timeout=30).json()
    assert plain["config"] == {}
    assert plain["storage-credentials"] == []


def test_concurrent_commits_one_wins_the_other_retries(stack: Stack, warehouse: str) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("results")
    catalog.create_table("results.counts", schema=ROWS, properties=NO_CLIENT_RETRIES)
    first, second = catalog.load_table("results.counts"), catalog.load_table("results.counts")

    first.append(_rows(1))
    with pytest.raises(CommitFailedException):
        second.append(_rows(2))  # built on the snapshot the first commit replaced
    second.refresh()
    second.append(_rows(2))

    assert sorted(catalog.load_table("results.counts").scan().to_arrow()["id"].to_pylist()) == [
        1,
        2,
    ]


def test_racing_writers_lose_no_row(stack: Stack, warehouse: str) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("results")
    catalog.create_table("results.race", schema=ROWS, properties=NO_CLIENT_RETRIES)

    def writer(worker: int) -> None:
        table = rest_catalog(stack, warehouse).load_table("results.race")
        for batch in range(3):
            while True:
                try:
                    table.append(_rows(worker * 100 + batch))
                    break
                except CommitFailedException:
                    table.refresh()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    table = catalog.load_table("results.race")
    ids = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert ids == sorted(w * 100 + b for w in range(4) for b in range(3))
    assert len(table.snapshots()) == 12


@pytest.mark.parametrize(
    ("change", "error_type", "named"),
    [
        (
            {"secret": "wrong-" + secrets.token_hex(8)},
            "StorageCredentialInvalid",
            "secret access key",
        ),
        ({"bucket": "no-such-bucket-x1"}, "StorageAccessDenied", "no-such-bucket-x1"),
        ({"endpoint": "http://127.0.0.1:9"}, "StorageEndpointUnreachable", "127.0.0.1:9"),
        ({"endpoint": "http://127.0.0.1:10"}, "StorageEndpointNotAllowed", "loopback"),
        ({"endpoint": "http://[::ffff:7f00:1]:9"}, "StorageEndpointNotAllowed", "loopback"),
    ],
    ids=[
        "wrong secret",
        "bucket not granted",
        "unreachable endpoint",
        "loopback endpoint",
        "mapped loopback endpoint",
    ],
)
def test_create_warehouse_validates_storage(
    stack: Stack, grant: BucketGrant, change: dict[str, str], error_type: str, named: str
) -> None:
    response = create_warehouse(stack, grant, f"bad-{uuid.uuid4().hex[:8]}", **change)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"]) == (error_type, 400)
    assert named in error["message"]


def test_create_warehouse_names_a_missing_bucket(stack: Stack, grant: BucketGrant) -> None:
    stack.s3.admin_s3().delete_bucket(Bucket=grant.bucket)  # the key may use it, but it is gone
    response = create_warehouse(stack, grant, f"gone-{uuid.uuid4().hex[:8]}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "StorageBucketNotFound"
    assert grant.bucket in error["message"]


def test_secrets_appear_in_no_response_and_no_catalog_log(stack: Stack, grant: BucketGrant) -> None:
    canary = "canary-" + secrets.token_hex(12)
    refused = create_warehouse(stack, grant, f"canary-{uuid.uuid4().hex[:8]}", secret=canary)
    accepted = create_warehouse(stack, grant, f"real-{uuid.uuid4().hex[:8]}")
    listed = management(stack, "GET", "/warehouse")
    for response in (refused, accepted, listed):
        assert canary not in response.text
        assert grant.access_key.secret_access_key not in response.text
    log = (stack.log_dir / "dev-catalog.log").read_text()
    assert canary not in log
    assert grant.access_key.secret_access_key not in log


def test_credentials_are_encrypted_at_rest(
    stack: Stack, grant: BucketGrant, warehouse: str
) -> None:
    dump = subprocess.run(
        [str(bin_dir() / "pg_dump"), stack.catalog_database_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "dev_catalog_warehouses" in dump
    assert grant.access_key.secret_access_key not in dump
    assert grant.access_key.access_key_id not in dump


def test_overlapping_locations_are_refused(stack: Stack, grant: BucketGrant) -> None:
    assert (
        create_warehouse(stack, grant, f"a-{uuid.uuid4().hex[:6]}", key_prefix="team/a").status_code
        == 201
    )
    nested = create_warehouse(stack, grant, f"b-{uuid.uuid4().hex[:6]}", key_prefix="team/a/b")
    enclosing = create_warehouse(stack, grant, f"c-{uuid.uuid4().hex[:6]}", key_prefix="team")
    sibling = create_warehouse(stack, grant, f"d-{uuid.uuid4().hex[:6]}", key_prefix="team/ab")
    for refused in (nested, enclosing):
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "CreateWarehouseStorageProfileOverlap"
    assert sibling.status_code == 201


def test_delete_is_refused_until_the_warehouse_is_empty(
    stack: Stack, grant: BucketGrant, warehouse: str
) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("results")
    table = catalog.create_table("results.doomed", schema=ROWS)
    table.append(_rows(1, 2, 3))
    warehouse_id = management(stack, "GET", "/warehouse").json()["warehouses"]
    [record] = [w for w in warehouse_id if w["name"] == warehouse]

    refused = management(stack, "DELETE", f"/warehouse/{record['id']}")
    assert refused.status_code == 409
    assert refused.json()["error"]["type"] == "WarehouseNotEmpty"

    catalog.purge_table("results.doomed")
    catalog.drop_namespace("results")
    assert management(stack, "DELETE", f"/warehouse/{record['id']}").status_code == 204
    assert management(stack, "GET", f"/warehouse/{record['id']}").status_code == 404
    leftover = stack.s3.admin_s3().list_objects_v2(Bucket=grant.bucket, Prefix="lake/")
    assert leftover.get("KeyCount", 0) == 0


def test_rotating_the_storage_credential(stack: Stack, grant: BucketGrant, warehouse: str) -> None:
    [record] = [
        w
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == warehouse
    ]
    url = f"/warehouse/{record['id']}/storage-credential"
    wrong = warehouse_request(grant, warehouse, secret="wrong-secret-value")["storage-credential"]
    refused = management(stack, "POST", url, json={"new-storage-credential": wrong})
    assert refused.status_code == 400

    iam = stack.s3.admin_iam()
    user = grant.bucket + "-owner"
    new_key = iam.create_access_key(UserName=user)["AccessKey"]
    new_credential = {
        "type": "s3",
        "credential-type": "access-key",
        "access-key-id": new_key["AccessKeyId"],
        "secret-access-key": new_key["SecretAccessKey"],
    }
    rotated = management(stack, "POST", url, json={"new-storage-credential": new_credential})
    assert rotated.status_code == 200
    assert new_key["SecretAccessKey"] not in rotated.text
    iam.delete_access_key(UserName=user, AccessKeyId=grant.access_key.access_key_id)

    # The old key is gone from the storage; the catalog works with the new one.
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("after")
    table = catalog.create_table("after.rotation", schema=ROWS)
    table.append(_rows(7))
    assert catalog.load_table("after.rotation").scan().to_arrow()["id"].to_pylist() == [7]


def test_deactivate_activate_and_rename(stack: Stack, warehouse: str) -> None:
    [record] = [
        w
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == warehouse
    ]
    config_url = f"{stack.catalog_url}/catalog/v1/config"
    assert management(stack, "POST", f"/warehouse/{record['id']}/deactivate").status_code == 200
    admin = admin_headers(stack)
    inactive = requests.get(config_url, params={"warehouse": warehouse}, headers=admin, timeout=30)
    assert inactive.status_code == 404
    assert inactive.json()["error"]["type"] == "WarehouseInactive"
    listed = management(stack, "GET", "/warehouse", params={"warehouseStatus": "inactive"}).json()
    assert record["id"] in [w["id"] for w in listed["warehouses"]]

    assert management(stack, "POST", f"/warehouse/{record['id']}/activate").status_code == 200
    renamed = management(
        stack, "POST", f"/warehouse/{record['id']}/rename", json={"new-name": warehouse + "-2"}
    )
    assert renamed.json()["name"] == warehouse + "-2"
    assert (
        requests.get(
            config_url, params={"warehouse": warehouse + "-2"}, headers=admin, timeout=30
        ).status_code
        == 200
    )
    assert (
        requests.get(
            config_url, params={"warehouse": warehouse}, headers=admin, timeout=30
        ).status_code
        == 404
    )


def test_only_a_hard_delete_profile_is_kept(
    stack: Stack, grant: BucketGrant, warehouse: str
) -> None:
    """This catalog drops tables at once: a soft profile (Lakekeeper keeps tables under it
    for a while) is refused, when a warehouse is created and later."""
    [record] = [
        w
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == warehouse
    ]
    path = f"/warehouse/{record['id']}/delete-profile"
    hard = management(stack, "POST", path, json={"delete-profile": {"type": "hard"}})
    assert hard.status_code == 200
    assert hard.json()["delete-profile"] == {"type": "hard"}
    soft = {"type": "soft", "expiration-seconds": 60}
    assert management(stack, "POST", path, json={"delete-profile": soft}).status_code == 400
    body = {**warehouse_request(grant, f"wh-{uuid.uuid4().hex[:8]}"), "delete-profile": soft}
    assert management(stack, "POST", "/warehouse", json=body).status_code == 400


def test_bootstrap_happens_once_and_projects_are_checked(stack: Stack) -> None:
    again = management(stack, "POST", "/bootstrap", json={"accept-terms-of-use": True})
    assert again.status_code == 400
    assert again.json()["error"]["type"] == "CatalogAlreadyBootstrapped"
    unknown = management(stack, "GET", "/warehouse", headers={"x-project-id": str(uuid.uuid4())})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "ProjectNotFound"
    nil_project = management(
        stack, "GET", "/warehouse", headers={"x-project-id": "00000000-0000-0000-0000-000000000000"}
    )
    assert nil_project.status_code == 200


def test_a_faulty_warehouse_leaves_the_others_alone(stack: Stack, warehouse: str) -> None:
    healthy_grant = stack.provision_bucket("bob")
    healthy = f"healthy-{uuid.uuid4().hex[:6]}"
    assert create_warehouse(stack, healthy_grant, healthy).status_code == 201
    [faulty] = [
        w
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == warehouse
    ]
    fault_url = f"{stack.catalog_url}/dev/v1/warehouse/{faulty['id']}/fault"
    faulty_catalog, healthy_catalog = rest_catalog(stack, warehouse), rest_catalog(stack, healthy)

    requests.put(fault_url, json={"fail-status": 503}, timeout=30).raise_for_status()
    with pytest.raises(Exception, match="injected failure"):
        faulty_catalog.list_namespaces()
    healthy_catalog.create_namespace("still-fine")

    # Slow: a request to the healthy warehouse started after one to the slow warehouse ends first.
    requests.put(fault_url, json={"delay-seconds": 3}, timeout=30).raise_for_status()
    finished: list[str] = []

    def list_and_record(catalog: RestCatalog, name: str) -> None:
        catalog.list_namespaces()
        finished.append(name)

    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(list_and_record, faulty_catalog, "faulty")
        time.sleep(0.3)
        fast = pool.submit(list_and_record, healthy_catalog, "healthy")
        fast.result()
        slow.result()
    assert finished == ["healthy", "faulty"]

    requests.delete(fault_url, timeout=30).raise_for_status()
    assert faulty_catalog.list_namespaces() == []


def test_protocol_edges_answer_as_the_spec_says(stack: Stack, warehouse: str) -> None:
    catalog = rest_catalog(stack, warehouse)
    catalog.create_namespace("edges")
    catalog.create_table("edges.t", schema=ROWS)
    admin = admin_headers(stack)
    [record] = [
        w
        for w in management(stack, "GET", "/warehouse").json()["warehouses"]
        if w["name"] == warehouse
    ]
    assert record["storage-credential-type"] == {"type": "s3", "credential-type": "access-key"}
    base = f"{stack.catalog_url}/catalog/v1/{record['id']}"

    listed = requests.get(f"{base}/namespaces", headers=admin, timeout=30)
    assert listed.json() == {"namespaces": [["edges"]]}  # a last page omits next-page-token
    catalog.create_namespace("edges2")
    catalog.create_namespace("edges3")
    first = requests.get(f"{base}/namespaces", headers=admin, timeout=30).json()
    assert first["namespaces"] == [["edges"], ["edges2"]]  # the test stack's pages hold two
    rest = requests.get(
        f"{base}/namespaces",
        params={"pageToken": first["next-page-token"]},
        headers=admin,
        timeout=30,
    )
    assert rest.json() == {"namespaces": [["edges3"]]}
    for bad in ({"pageSize": "0"}, {"pageToken": "not-ours"}):
        refused = requests.get(f"{base}/namespaces", params=bad, headers=admin, timeout=30)
        assert refused.status_code == 400, bad
    missing = requests.head(f"{base}/namespaces/nowhere", headers=admin, timeout=30)
    assert missing.status_code == 404
    assert missing.headers["Content-Type"].startswith("application/json")

    update = {"action": "set-properties", "updates": {"k": "v"}}
    commit = requests.post(
        f"{base}/namespaces/edges/tables/absent",
        json={"requirements": [], "updates": [update]},
        headers=admin,
        timeout=30,
    )
    assert commit.status_code == 404, commit.text
    assert commit.json()["error"]["type"] == "NoSuchTableException"
    unknown_schema = {"action": "set-current-schema", "schema-id": 99}
    invalid = requests.post(
        f"{base}/namespaces/edges/tables/t",
        json={"requirements": [], "updates": [unknown_schema]},
        headers=admin,
        timeout=30,
    )
    assert invalid.status_code == 400, invalid.text

    rename = {
        "source": {"namespace": ["edges"], "name": "t"},
        "destination": {"namespace": ["edges"], "name": 7},
    }
    renamed = requests.post(f"{base}/tables/rename", json=rename, headers=admin, timeout=30)
    assert renamed.status_code == 400, renamed.text

    assert management(stack, "POST", f"/warehouse/{record['id']}/deactivate").status_code == 200
    inactive = requests.get(f"{base}/namespaces", headers=admin, timeout=30)
    assert inactive.status_code == 404
    assert management(stack, "POST", f"/warehouse/{record['id']}/activate").status_code == 200
