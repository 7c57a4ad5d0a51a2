"""Who may call what behind the gateway: Texera tokens stop at the gateway, internal tokens work
only for their audience, and the registry's internal methods take computing units only."""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from functools import partial
from pathlib import Path

import asyncpg
import grpc
import pytest

from embedded_stack.stack import Stack
from service_runtime import auth
from service_runtime.auth import SERVICE_ROLE
from service_runtime.internal_tokens import unit_audience
from tests.integration.mesh import (
    computing_unit,
    create_warehouse,
    gateway_account,
    refused,
    register_unit,
    registry_as,
    user,
)
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import (
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_service_pb2,
    result_service_pb2_grpc,
    warehouse_service_pb2,
)

pytestmark = pytest.mark.integration
rs = registry_service_pb2


def test_texera_tokens_are_refused_everywhere_but_at_the_gateway(stack: Stack) -> None:
    texera = stack.token("alice")
    registry = registry_as(stack, "alice", texera)
    error = refused(
        lambda: registry.call(
            registry.warehouses.ListWarehouses, warehouse_service_pb2.ListWarehousesRequest()
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    results = result_service_pb2_grpc.ResultServiceStub(stack.channel("result-service"))
    error = refused(
        lambda: results.ListResults(
            result_service_pb2.ListResultsRequest(execution_id="ex-1"),
            metadata=(auth.bearer(texera),),
            timeout=30,
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    unit = execution_service_pb2_grpc.ExecutionServiceStub(
        stack.unit_channel(stack.unit_for("alice"))
    )
    error = refused(
        lambda: unit.ListExecutions(
            execution_service_pb2.ListExecutionsRequest(),
            metadata=(auth.bearer(texera),),
            timeout=30,
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_unit_takes_a_users_call_only_with_the_gateways_token_beside_it(stack: Stack) -> None:
    unit = stack.unit_for("alice")
    stub = execution_service_pb2_grpc.ExecutionServiceStub(stack.unit_channel(unit))
    request = execution_service_pb2.GetExecutionRequest(execution_id="ex-no-such-execution")
    users = stack.unit_token("alice", unit.unit_id)
    results = stack.internal_token("result-service", unit_audience(unit.unit_id), SERVICE_ROLE)
    refusals: list[tuple[tuple[str, str], ...]] = [
        (auth.bearer(users),),  # the user's token for this unit, found wherever
        (auth.bearer(results), (auth.ON_BEHALF_KEY, users)),  # carried by another service
    ]
    for metadata in refusals:
        error = refused(partial(stub.GetExecution, request, metadata=metadata, timeout=30))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error.details()
    forwarded = refused(
        lambda: stub.GetExecution(
            request, metadata=stack.unit_call_metadata("alice", unit.unit_id), timeout=30
        )
    )
    assert forwarded.code() == grpc.StatusCode.NOT_FOUND  # authenticated: alice, for real


def test_a_token_minted_for_a_unit_is_worth_nothing_elsewhere(stack: Stack) -> None:
    for_unit = stack.unit_token("alice", "cu-mine")
    registry = registry_as(stack, "alice", for_unit)
    error = refused(
        lambda: registry.call(
            registry.warehouses.ListWarehouses, warehouse_service_pb2.ListWarehousesRequest()
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "another service" in (error.details() or "")
    other_unit = computing_unit(stack, "cu-other")
    acting = registry_as(
        stack,
        "alice",
        other_unit.metadata[0][1].removeprefix("Bearer "),
        on_behalf=for_unit,
        as_unit=True,
    )
    error = refused(
        lambda: acting.call(acting.ledger.ResolveExecution, rs.ResolveExecutionRequest())
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_internal_methods_refuse_users(stack: Stack) -> None:
    alice = user(stack, f"alice-{uuid.uuid4().hex[:6]}")
    warehouse_id = create_warehouse(alice, stack.provision_bucket("identity")).warehouse_id
    unit_id = register_unit(stack)
    calls = {
        "BindExecution": lambda: alice.call(
            alice.ledger.BindExecution,
            rs.BindExecutionRequest(
                execution_id=f"ex-{uuid.uuid4().hex[:8]}",
                warehouse_id=warehouse_id,
                computing_unit_id=unit_id,
            ),
        ),
        "ListUnitRegistrations": lambda: alice.call(
            alice.leases.ListUnitRegistrations, rs.ListUnitRegistrationsRequest()
        ),
        "RegisterComputingUnit": lambda: alice.call(
            alice.leases.RegisterComputingUnit,
            rs.RegisterComputingUnitRequest(
                computing_unit_id="cu-ghost", endpoint="127.0.0.1:1", capacity=1
            ),
        ),
        "HeartbeatComputingUnit": lambda: alice.call(
            alice.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(computing_unit_id=unit_id),
        ),
    }
    for name, call in calls.items():
        assert refused(call).code() == grpc.StatusCode.PERMISSION_DENIED, name
    # No ghost binding was left behind: the warehouse has no execution.
    listed = alice.call(alice.ledger.ListExecutionRecords, rs.ListExecutionRecordsRequest())
    assert [e for e in listed.executions if e.warehouse_id == warehouse_id] == []


def test_a_unit_binds_only_as_itself_and_only_for_a_user(stack: Stack) -> None:
    alice = user(stack, f"alice-{uuid.uuid4().hex[:6]}")
    warehouse_id = create_warehouse(alice, stack.provision_bucket("identity")).warehouse_id
    unit_id = register_unit(stack, shared_with=(alice.subject,))
    other_id = register_unit(stack, shared_with=(alice.subject,))
    request = rs.BindExecutionRequest(
        execution_id=f"ex-{uuid.uuid4().hex[:8]}",
        warehouse_id=warehouse_id,
        computing_unit_id=other_id,
    )
    through = alice.through(unit_id)
    assert (
        refused(lambda: through.call(through.ledger.BindExecution, request)).code()
        == grpc.StatusCode.PERMISSION_DENIED
    )
    alone = computing_unit(stack, unit_id)
    request.computing_unit_id = unit_id
    assert (
        refused(lambda: alone.call(alone.ledger.BindExecution, request)).code()
        == grpc.StatusCode.PERMISSION_DENIED
    )
    bound = through.call(through.ledger.BindExecution, request)
    assert bound.execution.owner_user_id == alice.subject
    gateway = gateway_account(stack)
    listed = gateway.call(gateway.leases.ListUnitRegistrations, rs.ListUnitRegistrationsRequest())
    assert unit_id in [u.computing_unit_id for u in listed.registrations]


def test_no_secret_is_in_any_service_environment_or_command_line(stack: Stack) -> None:
    secrets = [
        stack.jwt_secret,
        stack.secrets.catalog_key,
        stack.secrets.database_password,
        stack.secrets.gateway_key.splitlines()[1],
        stack.secrets.registry_key.splitlines()[1],
        *stack.secrets.page_token_keys.values(),
        stack.s3.administrator().key.secret_access_key,
    ]
    unit = stack.unit_for("secret-seeker")
    parts = {p: stack.pid(p) for p in ("gateway", "warehouse-service", "result-service")}
    for part, pid in {**parts, "dev-catalog": stack.pid("dev-catalog"), "unit": unit.pid}.items():
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        for secret in secrets:
            assert secret not in environ, part
            assert secret not in cmdline, part
    folder = stack.state_dir / "secrets"
    for path in [*folder.rglob("*"), stack.s3.admin_key_file]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 == 0, f"{path} is {mode:o}"
    # A unit is handed its own credential alone, and deletes that file once read.
    for path in stack.unit_root.rglob("*"):
        if path.is_file():
            content = path.read_text(errors="replace")
            assert not any(secret in content for secret in secrets), path


def test_postgres_requires_a_password(stack: Stack) -> None:
    async def connect() -> None:
        connection = await asyncpg.connect(
            host="127.0.0.1", port=stack.ports.postgres, user="postgres", database="postgres"
        )
        await connection.close()

    with pytest.raises(asyncpg.PostgresError, match="password"):
        asyncio.run(connect())
