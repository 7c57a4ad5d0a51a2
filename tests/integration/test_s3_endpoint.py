"""The stack's S3 endpoint treats credentials as S3 and MinIO do."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import psutil
import pyarrow as pa
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from embedded_stack.s3.endpoint import REGION, BucketGrant
from embedded_stack.stack import Stack
from lake_client.stack_state import ENDPOINTS_FILE
from service_runtime.execution_states import state_name
from tests.integration.catalog_client import create_warehouse, rest_catalog
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    sleeping_udf,
    udf_workflow,
    unit_as,
    workflow,
)
from tests.integration.mesh import create_warehouse as create_registry_warehouse
from tests.integration.mesh import user

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration


def _s3(endpoint: str, key: str, secret: str, token: str | None = None) -> S3Client:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(retries={"max_attempts": 1}),
    )


def _error_code(call: Callable[[], object]) -> str:
    with pytest.raises(ClientError) as error:
        call()
    return str(error.value.response["Error"]["Code"])


@pytest.fixture
def grant(stack: Stack) -> BucketGrant:
    return stack.provision_bucket("carol")


def test_the_owner_key_works_on_its_bucket(grant: BucketGrant) -> None:
    s3 = _s3(grant.endpoint, grant.access_key.access_key_id, grant.access_key.secret_access_key)
    s3.put_object(Bucket=grant.bucket, Key="hello.txt", Body=b"hi")
    assert s3.get_object(Bucket=grant.bucket, Key="hello.txt")["Body"].read() == b"hi"


def test_unknown_keys_and_wrong_secrets_are_refused(grant: BucketGrant) -> None:
    unknown = _s3(grant.endpoint, "AKIA" + uuid.uuid4().hex[:16].upper(), "whatever")
    wrong_secret = _s3(grant.endpoint, grant.access_key.access_key_id, "not-the-secret")
    assert (
        _error_code(lambda: unknown.put_object(Bucket=grant.bucket, Key="x", Body=b"x"))
        == "InvalidAccessKeyId"
    )
    assert (
        _error_code(lambda: wrong_secret.put_object(Bucket=grant.bucket, Key="x", Body=b"x"))
        == "SignatureDoesNotMatch"
    )


def test_a_key_cannot_use_another_users_bucket(stack: Stack, grant: BucketGrant) -> None:
    other = stack.provision_bucket("dave")
    s3 = _s3(grant.endpoint, grant.access_key.access_key_id, grant.access_key.secret_access_key)
    assert (
        _error_code(lambda: s3.put_object(Bucket=other.bucket, Key="x", Body=b"x"))
        == "AccessDenied"
    )
    assert _error_code(lambda: s3.list_objects_v2(Bucket=other.bucket)) == "AccessDenied"


def test_the_emulators_admin_api_is_not_reachable(grant: BucketGrant) -> None:
    assert requests.get(f"{grant.endpoint}/moto-api/", timeout=10).status_code == 403
    assert (
        requests.post(f"{grant.endpoint}/moto-api/reset-auth", data="inf", timeout=10).status_code
        == 403
    )
    # Authentication is still on.
    anonymous = requests.put(f"{grant.endpoint}/{grant.bucket}/x", data=b"x", timeout=10)
    assert anonymous.status_code == 403


def _stack_ports(stack: Stack) -> set[int]:
    """Every port in the stack's endpoints and Ports, and every port its processes listen on."""
    endpoints = (stack.state_dir / ENDPOINTS_FILE).read_text()
    ports = {int(p) for p in re.findall(rf"{re.escape(stack.settings.host)}:(\d+)", endpoints)}
    ports |= {p for p in (stack.ports.postgres, stack.ports.s3, stack.ports.catalog) if p}
    ports |= {p for p in (*stack.ports.grpc.values(), *stack.ports.metrics.values()) if p}
    for process in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            ports |= {
                c.laddr.port
                for c in process.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN
            }
    return ports - {0}


def _from_motos_admin_api(answer: requests.Response, bucket: str) -> bool:
    """Whether an answer is one of moto's admin API (its dashboard, its state, a reset done).
    Other servers may answer 200 to any path (a metrics endpoint does)."""
    text = answer.text
    return answer.ok and ("moto" in text.lower() or bucket in text or '"status": "ok"' in text)


def test_no_port_of_the_stack_serves_the_emulators_admin_api(
    stack: Stack, grant: BucketGrant
) -> None:
    stack.unit_for(SHARED_UNIT_OWNER)  # a computing unit's ports are probed too
    ports = _stack_ports(stack)
    assert {stack.ports.s3, stack.ports.catalog, stack.ports.postgres} <= ports
    assert len(ports) >= 10
    for port in ports:
        for method, path in (
            ("GET", "/moto-api/"),
            ("GET", "/moto-api/data.json"),
            ("POST", "/moto-api/reset"),
        ):
            try:
                answer = requests.request(method, f"http://127.0.0.1:{port}{path}", timeout=(2, 5))
            except requests.RequestException:
                break  # not HTTP, or no answer: not moto's API either, at any path
            assert not _from_motos_admin_api(answer, grant.bucket), (port, path)
    # Nothing was reset: the bucket is still there.
    stack.s3.admin_s3().head_bucket(Bucket=grant.bucket)


def test_expired_temporary_credentials_are_refused(grant: BucketGrant) -> None:
    sts = boto3.client(
        "sts",
        endpoint_url=grant.endpoint,
        region_name=REGION,
        aws_access_key_id=grant.access_key.access_key_id,
        aws_secret_access_key=grant.access_key.secret_access_key,
        config=Config(parameter_validation=False),  # STS's 900 s minimum is a client-side check
    )
    credentials = sts.assume_role(
        RoleArn=grant.role_arn, RoleSessionName="expiry-test", DurationSeconds=2
    )["Credentials"]
    temporary = _s3(
        grant.endpoint,
        credentials["AccessKeyId"],
        credentials["SecretAccessKey"],
        credentials["SessionToken"],
    )
    temporary.put_object(Bucket=grant.bucket, Key="before", Body=b"ok")
    time.sleep(max(0.0, credentials["Expiration"].timestamp() - time.time()) + 0.5)
    assert (
        _error_code(lambda: temporary.put_object(Bucket=grant.bucket, Key="after", Body=b"x"))
        == "ExpiredToken"
    )


def test_a_session_policy_narrows_temporary_credentials(grant: BucketGrant) -> None:
    """As S3 and MinIO do: credentials assumed with a session policy reach what both the role
    and the policy allow (here, reading one prefix)."""
    owner = _s3(grant.endpoint, grant.access_key.access_key_id, grant.access_key.secret_access_key)
    for key in ("table-a/data", "table-b/data"):
        owner.put_object(Bucket=grant.bucket, Key=key, Body=b"rows")
    sts = boto3.client(
        "sts",
        endpoint_url=grant.endpoint,
        region_name=REGION,
        aws_access_key_id=grant.access_key.access_key_id,
        aws_secret_access_key=grant.access_key.secret_access_key,
    )
    read_one_prefix = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": f"arn:aws:s3:::{grant.bucket}/table-a/*",
            }
        ],
    }
    credentials = sts.assume_role(
        RoleArn=grant.role_arn,
        RoleSessionName="narrowed",
        Policy=json.dumps(read_one_prefix),
    )["Credentials"]
    narrowed = _s3(
        grant.endpoint,
        credentials["AccessKeyId"],
        credentials["SecretAccessKey"],
        credentials["SessionToken"],
    )
    assert narrowed.get_object(Bucket=grant.bucket, Key="table-a/data")["Body"].read() == b"rows"
    refused = [
        lambda: narrowed.get_object(Bucket=grant.bucket, Key="table-b/data"),
        lambda: narrowed.put_object(Bucket=grant.bucket, Key="table-a/forged", Body=b"x"),
        lambda: narrowed.delete_object(Bucket=grant.bucket, Key="table-a/data"),
    ]
    assert [_error_code(call) for call in refused] == ["AccessDenied"] * 3
    batch = narrowed.delete_objects(
        Bucket=grant.bucket, Delete={"Objects": [{"Key": "table-a/data"}]}
    )
    assert [e["Code"] for e in batch.get("Errors", [])] == ["AccessDenied"]  # reading only
    widest = sts.assume_role(RoleArn=grant.role_arn, RoleSessionName="whole-role")["Credentials"]
    whole = _s3(
        grant.endpoint, widest["AccessKeyId"], widest["SecretAccessKey"], widest["SessionToken"]
    )
    whole.put_object(Bucket=grant.bucket, Key="table-b/more", Body=b"x")  # no policy: the role


def test_vended_credentials_expire_and_a_reload_renews_them(short_lived_stack: Stack) -> None:
    stack = short_lived_stack
    grant = stack.provision_bucket("erin")
    assert create_warehouse(stack, grant, "short").status_code == 201
    catalog = rest_catalog(stack, "short")
    catalog.create_namespace("results")
    table = catalog.create_table("results.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    stale = catalog.load_table("results.t")
    assert stale.scan().to_arrow().num_rows == 3

    vended = stale.io.properties
    time.sleep(max(0.0, int(vended["s3.session-token-expires-at-ms"]) / 1000 - time.time()) + 0.5)
    with pytest.raises(OSError, match="HTTP status 400"):  # a HEAD: S3 sends no error body
        stale.scan().to_arrow()
    s3 = _s3(
        grant.endpoint,
        vended["s3.access-key-id"],
        vended["s3.secret-access-key"],
        vended["s3.session-token"],
    )
    metadata_key = stale.metadata_location.removeprefix(f"s3://{grant.bucket}/")
    assert (
        _error_code(lambda: s3.get_object(Bucket=grant.bucket, Key=metadata_key)) == "ExpiredToken"
    )
    assert catalog.load_table("results.t").scan().to_arrow().num_rows == 3


def test_no_log_of_the_s3_gate_shows_a_secret(stack: Stack, grant: BucketGrant) -> None:
    for log in Path(stack.log_dir).glob("s3*.log"):
        assert grant.access_key.secret_access_key not in log.read_text()


def _renewals(stack: Stack) -> int:
    """How many times the registry has vended fresh credentials to a task (tasks hold no
    catalog token: they renew through the registry, with their execution's token)."""
    lines = (stack.log_dir / "warehouse-service.log").read_text().splitlines()
    return sum(1 for line in lines if "/VendTableCredentials" in line and '"code": "OK"' in line)


def test_an_execution_outliving_its_credentials_still_commits(short_lived_stack: Stack) -> None:
    stack = short_lived_stack
    owner = f"patient-{uuid.uuid4().hex[:6]}"
    warehouse = create_registry_warehouse(user(stack, owner), stack.provision_bucket("patient"))
    client = unit_as(stack, owner)
    flow = udf_workflow("slow", sleeping_udf(2.0), end=8000, partitions=12)
    started = time.monotonic()
    execution = client.finish(client.submit(warehouse.warehouse_id, flow).execution_id)
    assert time.monotonic() - started > 3 * 3  # several lifetimes of the vended credentials
    assert state_name(execution) == "SUCCEEDED", execution.error
    [output] = execution.outputs
    assert output.row_count == 8000
    assert execution.progress.commits >= 2  # one per wave of tasks, the later ones after expiry
    table = rest_catalog(stack, warehouse.catalog_warehouse_name).load_table(
        (output.namespace, output.table_name)
    )
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(8000))
    assert _renewals(stack) > 0  # tasks asked the registry for fresh credentials


def test_a_write_stage_starting_after_its_credentials_expired_renews_them(
    short_lived_stack: Stack,
) -> None:
    """The table's credentials are vended when the write begins; its tasks run only after a
    shuffle that outlasts them (three seconds), and renew them before their first file."""
    stack = short_lived_stack
    owner = f"late-{uuid.uuid4().hex[:6]}"
    warehouse = create_registry_warehouse(user(stack, owner), stack.provision_bucket("late"))
    client = unit_as(stack, owner)
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 6000, "partitions": 2}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": sleeping_udf(4.0),
            },
            {
                "operator_id": "counted",
                "input_operator_ids": ["slow"],
                "aggregate": {
                    "group_by": ["id"],
                    "aggregations": [{"function": "AGGREGATE_FUNCTION_COUNT", "alias": "times"}],
                },
                "materialize": True,
            },
        ]
    )
    renewals_before = _renewals(stack)
    execution = client.finish(client.submit(warehouse.warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    [output] = execution.outputs
    assert output.row_count == 6000
    table = rest_catalog(stack, warehouse.catalog_warehouse_name).load_table(
        (output.namespace, output.table_name)
    )
    rows = table.scan().to_arrow()
    assert sorted(rows["id"].to_pylist()) == list(range(6000))
    assert set(rows["times"].to_pylist()) == {1}
    assert _renewals(stack) > renewals_before
