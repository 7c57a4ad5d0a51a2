"""No cross-tenant access, and no secret in the database or any log."""

from __future__ import annotations

import secrets
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from embedded_stack.postgres import bin_dir
from embedded_stack.stack import Stack
from tests.integration.mesh import (
    RegistryClient,
    computing_unit,
    create_request,
    create_warehouse,
    credentials,
    refused,
    register_unit,
    user,
)
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, warehouse_pb2, warehouse_service_pb2

pytestmark = pytest.mark.integration

rs = registry_service_pb2
ws = warehouse_service_pb2


@dataclass
class Tenancy:
    """Alice's warehouse and execution, and Bob, who must not reach them."""

    alice: RegistryClient
    bob: RegistryClient
    unit: RegistryClient
    warehouse_id: str
    execution_id: str


@pytest.fixture(scope="module")
def tenancy(stack: Stack) -> Tenancy:
    alice = user(stack, f"alice-{uuid.uuid4().hex[:6]}")
    bob = user(stack, f"bob-{uuid.uuid4().hex[:6]}")
    # A unit both may run on: what keeps Alice's things from Bob is the registry, not the unit.
    unit = computing_unit(stack, register_unit(stack, shared_with=(alice.subject, bob.subject)))
    grant = stack.provision_bucket("tenant")
    warehouse_id = create_warehouse(alice, grant).warehouse_id
    execution_id = f"ex-{uuid.uuid4().hex[:10]}"
    unit.for_user(alice).call(
        unit.ledger.BindExecution,
        rs.BindExecutionRequest(
            execution_id=execution_id, warehouse_id=warehouse_id, computing_unit_id=unit.subject
        ),
    )
    return Tenancy(alice, bob, unit, warehouse_id, execution_id)


# Every RPC, called by Bob (or with Bob's token) against Alice's resources.
CROSS_TENANT: list[tuple[str, Callable[[Tenancy], Any], grpc.StatusCode]] = [
    (
        "GetWarehouse",
        lambda t: t.bob.call(
            t.bob.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=t.warehouse_id)
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "RotateWarehouseCredentials",
        lambda t: t.bob.call(
            t.bob.warehouses.RotateWarehouseCredentials,
            ws.RotateWarehouseCredentialsRequest(
                warehouse_id=t.warehouse_id,
                credentials=warehouse_pb2.S3Credentials(
                    access_key_id="AKIABOB", secret_access_key="bob"
                ),
            ),
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "ArchiveWarehouse",
        lambda t: t.bob.call(
            t.bob.warehouses.ArchiveWarehouse,
            ws.ArchiveWarehouseRequest(warehouse_id=t.warehouse_id),
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "RestoreWarehouse",
        lambda t: t.bob.call(
            t.bob.warehouses.RestoreWarehouse,
            ws.RestoreWarehouseRequest(warehouse_id=t.warehouse_id),
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "DeleteWarehouse",
        lambda t: t.bob.call(
            t.bob.warehouses.DeleteWarehouse,
            ws.DeleteWarehouseRequest(warehouse_id=t.warehouse_id, purge=True),
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "BindExecution (Alice's warehouse)",
        lambda t: t.unit.for_user(t.bob).call(
            t.unit.ledger.BindExecution,
            rs.BindExecutionRequest(
                execution_id=f"ex-{uuid.uuid4().hex[:10]}",
                warehouse_id=t.warehouse_id,
                computing_unit_id=t.unit.subject,
            ),
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "BindExecution (Alice's execution id)",
        lambda t: t.unit.for_user(t.bob).call(
            t.unit.ledger.BindExecution,
            rs.BindExecutionRequest(
                execution_id=t.execution_id,
                warehouse_id=t.warehouse_id,
                computing_unit_id=t.unit.subject,
            ),
        ),
        grpc.StatusCode.ALREADY_EXISTS,
    ),
    (
        "UpdateExecutionState",
        lambda t: t.bob.call(
            t.bob.ledger.UpdateExecutionState,
            rs.UpdateExecutionStateRequest(
                execution_id=t.execution_id,
                computing_unit_id=t.unit.subject,
                state=execution_pb2.EXECUTION_STATE_RUNNING,
            ),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    ),
    (
        "ResolveExecution",
        lambda t: t.bob.call(
            t.bob.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=t.execution_id)
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "ResolveWarehouse",
        lambda t: t.bob.call(
            t.bob.ledger.ResolveWarehouse, rs.ResolveWarehouseRequest(warehouse_id=t.warehouse_id)
        ),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        "RegisterComputingUnit",
        lambda t: t.bob.call(
            t.bob.leases.RegisterComputingUnit,
            rs.RegisterComputingUnitRequest(
                computing_unit_id=t.unit.subject, endpoint="evil:1", capacity=1
            ),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    ),
    (
        "HeartbeatComputingUnit",
        lambda t: t.bob.call(
            t.bob.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(computing_unit_id=t.unit.subject),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    ),
]


@pytest.mark.parametrize(
    ("method", "call", "code"), CROSS_TENANT, ids=[m for m, _, _ in CROSS_TENANT]
)
def test_bob_cannot_reach_alices_resources(
    tenancy: Tenancy, method: str, call: Callable[[Tenancy], Any], code: grpc.StatusCode
) -> None:
    error = refused(lambda: call(tenancy))
    assert error.code() == code


def test_bobs_lists_never_show_alices_resources(tenancy: Tenancy) -> None:
    bob = tenancy.bob
    warehouses = bob.call(bob.warehouses.ListWarehouses, ws.ListWarehousesRequest())
    assert tenancy.warehouse_id not in [w.warehouse_id for w in warehouses.warehouses]
    listing = tenancy.unit.for_user(bob)
    executions = listing.call(listing.ledger.ListExecutionRecords, rs.ListExecutionRecordsRequest())
    assert tenancy.execution_id not in [e.execution_id for e in executions.executions]
    filtered = listing.call(
        listing.ledger.ListExecutionRecords,
        rs.ListExecutionRecordsRequest(warehouse_id=tenancy.warehouse_id),
    )
    assert list(filtered.executions) == []


def test_alice_still_has_everything_after_bobs_attempts(tenancy: Tenancy) -> None:
    alice = tenancy.alice
    warehouse = alice.call(
        alice.warehouses.GetWarehouse, ws.GetWarehouseRequest(warehouse_id=tenancy.warehouse_id)
    )
    assert warehouse.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE
    assert warehouse.warehouse.credential_version == 1
    resolved = alice.call(
        alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=tenancy.execution_id)
    )
    assert resolved.execution.state == execution_pb2.EXECUTION_STATE_QUEUED


def test_request_ids_belong_to_their_owner(stack: Stack, tenancy: Tenancy) -> None:
    request_id = str(uuid.uuid4())
    alices = create_warehouse(tenancy.alice, stack.provision_bucket("rid-a"), request_id=request_id)
    bobs = create_warehouse(tenancy.bob, stack.provision_bucket("rid-b"), request_id=request_id)
    assert alices.warehouse_id != bobs.warehouse_id
    assert bobs.owner_user_id == tenancy.bob.subject


def test_no_secret_reaches_the_database_or_any_log(stack: Stack) -> None:
    """Create and rotate with a unique secret, then search a dump of every database and every log."""
    owner = user(stack, f"canary-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("canary")
    # Both keys' secrets are random and appear nowhere else: canaries.
    second = stack.s3.admin_iam().create_access_key(UserName=f"{grant.bucket}-owner")["AccessKey"]
    warehouse = owner.call(owner.warehouses.CreateWarehouse, create_request(grant)).warehouse
    owner.call(
        owner.warehouses.RotateWarehouseCredentials,
        ws.RotateWarehouseCredentialsRequest(
            warehouse_id=warehouse.warehouse_id,
            credentials=credentials(
                grant, key_id=second["AccessKeyId"], secret=second["SecretAccessKey"]
            ),
        ),
    )
    refused_secret = f"canary-{secrets.token_hex(16)}"
    refused(
        lambda: owner.call(
            owner.warehouses.CreateWarehouse,
            create_request(grant, key_prefix="x", secret=refused_secret),
        )
    )

    searched = {refused_secret, grant.access_key.secret_access_key, second["SecretAccessKey"]}
    dumps = [
        subprocess.run(
            [str(bin_dir() / "pg_dump"), url], capture_output=True, text=True, check=True
        ).stdout
        for url in (stack.database_url, stack.catalog_database_url)
    ]
    assert warehouse.warehouse_id in dumps[0]  # the dump is of the right database
    logs = [path.read_text(errors="replace") for path in stack.log_dir.glob("*.log")]
    assert any(
        '"rpc started"' in log and "CreateWarehouse" in log for log in logs
    )  # requests were logged
    for secret in searched:
        for text in (*dumps, *logs):
            assert secret not in text
