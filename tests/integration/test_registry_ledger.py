"""The registry's internal services (the execution ledger, units' leases), on the real
registry."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import grpc
import pytest

from embedded_stack.stack import Stack
from tests.conftest import TEST_STACK_ENV
from tests.integration.mesh import (
    RegistryClient,
    bad_fields,
    computing_unit,
    create_warehouse,
    eventually,
    gateway_account,
    reason_of,
    record_unit,
    refused,
    register_unit,
    user,
)
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, warehouse_pb2, warehouse_service_pb2

pytestmark = pytest.mark.integration

rs = registry_service_pb2
ws = warehouse_service_pb2
EX = execution_pb2


@pytest.fixture
def alice(stack: Stack) -> RegistryClient:
    return user(stack, f"alice-{uuid.uuid4().hex[:6]}")


@pytest.fixture
def warehouse_id(stack: Stack, alice: RegistryClient) -> str:
    return create_warehouse(alice, stack.provision_bucket("ledger")).warehouse_id


@pytest.fixture
def unit(stack: Stack, alice: RegistryClient) -> RegistryClient:
    """A unit shared with alice."""
    return computing_unit(stack, register_unit(stack, shared_with=(alice.subject,)))


def bind(
    client: RegistryClient,
    execution_id: str,
    warehouse_id: str,
    unit: RegistryClient,
    **fields: Any,
) -> Any:
    """Binds as the unit does: with its credential, for the user client."""
    request = rs.BindExecutionRequest(
        execution_id=execution_id,
        warehouse_id=warehouse_id,
        computing_unit_id=unit.subject,
        **fields,
    )
    acting = unit.for_user(client)
    return acting.call(acting.ledger.BindExecution, request)


def listed(unit: RegistryClient, client: RegistryClient, **fields: Any) -> Any:
    """The executions of client as the unit (or a service) lists them for client."""
    acting = unit.for_user(client)
    return acting.call(acting.ledger.ListExecutionRecords, rs.ListExecutionRecordsRequest(**fields))


def report(unit: RegistryClient, execution_id: str, state: Any = 0, **fields: Any) -> Any:
    request = rs.UpdateExecutionStateRequest(
        execution_id=execution_id, computing_unit_id=unit.subject, state=state, **fields
    )
    return unit.call(unit.ledger.UpdateExecutionState, request).execution


def new_id() -> str:
    return f"ex-{uuid.uuid4().hex[:12]}"


def test_bind_records_the_execution_and_hands_the_unit_no_catalog_token(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bound = bind(
        alice,
        execution_id,
        warehouse_id,
        unit,
        workflow_id="wf-7",
        workflow_fingerprint="abc",
    )
    assert bound.created
    assert bound.execution.state == EX.EXECUTION_STATE_QUEUED
    assert bound.execution.owner_user_id == alice.subject
    # A unit reaches the catalog through the gatekeeper alone: no address, no token here.
    assert not bound.binding.catalog_uri
    assert not bound.binding.catalog_token
    assert bound.binding.catalog_warehouse == f"texera-{warehouse_id}"
    assert bound.binding.backend == rs.CATALOG_BACKEND_REST
    assert bound.binding.credential_version == 1

    replay = bind(alice, execution_id, warehouse_id, unit, workflow_fingerprint="abc")
    assert not replay.created
    assert replay.execution == bound.execution


def test_bind_refuses_a_taken_id_another_warehouse_or_workflow(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit, workflow_fingerprint="one")
    other_warehouse = create_warehouse(alice, stack.provision_bucket("other")).warehouse_id
    for attempt in (
        lambda: bind(alice, execution_id, other_warehouse, unit),
        lambda: bind(alice, execution_id, warehouse_id, unit, workflow_fingerprint="two"),
    ):
        assert refused(attempt).code() == grpc.StatusCode.ALREADY_EXISTS


def test_bind_with_a_request_id_returns_the_first_execution(
    alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    request_id = str(uuid.uuid4())
    first = bind(alice, new_id(), warehouse_id, unit, request_id=request_id)
    retry = bind(alice, new_id(), warehouse_id, unit, request_id=request_id)
    assert retry.execution.execution_id == first.execution.execution_id
    assert not retry.created


def test_bind_needs_an_active_warehouse_and_a_live_unit(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    alice.call(
        alice.warehouses.ArchiveWarehouse, ws.ArchiveWarehouseRequest(warehouse_id=warehouse_id)
    )
    archived = refused(lambda: bind(alice, new_id(), warehouse_id, unit))
    assert archived.code() == grpc.StatusCode.FAILED_PRECONDITION
    alice.call(
        alice.warehouses.RestoreWarehouse, ws.RestoreWarehouseRequest(warehouse_id=warehouse_id)
    )
    # A credential of a unit no launcher ever started belongs to no launch of it.
    stranger = computing_unit(stack, "cu-never-recorded")
    unknown_unit = refused(lambda: bind(alice, new_id(), warehouse_id, stranger))
    assert unknown_unit.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(unknown_unit)[0] == "UNIT_CREDENTIAL_REVOKED"
    missing = refused(lambda: bind(alice, new_id(), str(uuid.uuid4()), unit))
    assert missing.code() == grpc.StatusCode.NOT_FOUND


def test_state_machine_progress_and_outputs(
    alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    running = report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)
    assert running.HasField("start_time")
    progress = EX.ExecutionProgress(stages_total=3, stages_completed=1, rows_written=1000)
    output = EX.ExecutionOutput(
        operator_id="op1",
        namespace="results",
        table_name="t_op1",
        row_count=1000,
        snapshot_id=42,
        file_count=2,
    )
    updated = report(unit, execution_id, progress=progress, outputs=[output])
    assert updated.state == EX.EXECUTION_STATE_RUNNING
    assert updated.progress == progress
    assert list(updated.outputs) == [output]
    done = report(unit, execution_id, EX.EXECUTION_STATE_SUCCEEDED)
    assert done.HasField("end_time")
    assert list(done.outputs) == [output]  # kept when not reported again

    assert (
        report(unit, execution_id, EX.EXECUTION_STATE_SUCCEEDED) == done
    )  # same terminal state: a no-op
    for later in (EX.EXECUTION_STATE_RUNNING, EX.EXECUTION_STATE_FAILED):
        error = refused(
            lambda state=later: report(
                unit, execution_id, state, error=EX.ExecutionError(reason="X")
            )  # type: ignore[misc]
        )
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    resolved = alice.call(
        alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
    )
    assert resolved.execution == done


def test_transitions_that_skip_a_step_or_lack_a_reason_are_refused(
    alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    skipped = refused(lambda: report(unit, execution_id, EX.EXECUTION_STATE_SUCCEEDED))
    assert skipped.code() == grpc.StatusCode.FAILED_PRECONDITION
    no_reason = refused(lambda: report(unit, execution_id, EX.EXECUTION_STATE_FAILED))
    assert no_reason.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(no_reason) == {"error.reason"}
    cancelled = report(
        unit,
        execution_id,
        EX.EXECUTION_STATE_CANCELLED,
        error=EX.ExecutionError(reason="CANCELLED_BY_USER"),
    )
    assert cancelled.error.reason == "CANCELLED_BY_USER"


def test_only_the_executions_unit_may_report(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    other = computing_unit(stack, register_unit(stack))
    impostor = refused(lambda: report(other, execution_id, EX.EXECUTION_STATE_RUNNING))
    assert impostor.code() == grpc.StatusCode.PERMISSION_DENIED
    # A token for one unit cannot speak for another unit either.
    forged = rs.UpdateExecutionStateRequest(
        execution_id=execution_id, computing_unit_id=unit.subject, state=EX.EXECUTION_STATE_RUNNING
    )
    assert refused(lambda: other.call(other.ledger.UpdateExecutionState, forged)).code() == (
        grpc.StatusCode.PERMISSION_DENIED
    )


def test_archived_results_resolve_deleted_ones_do_not(
    stack: Stack, alice: RegistryClient, unit: RegistryClient
) -> None:
    warehouse_id = create_warehouse(alice, stack.provision_bucket("life")).warehouse_id
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    running = refused(
        lambda: alice.call(
            alice.warehouses.DeleteWarehouse, ws.DeleteWarehouseRequest(warehouse_id=warehouse_id)
        )
    )
    assert running.code() == grpc.StatusCode.FAILED_PRECONDITION
    report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)
    report(unit, execution_id, EX.EXECUTION_STATE_SUCCEEDED)

    alice.call(
        alice.warehouses.ArchiveWarehouse, ws.ArchiveWarehouseRequest(warehouse_id=warehouse_id)
    )
    resolved = alice.call(
        alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
    )
    assert resolved.binding.state == warehouse_pb2.WAREHOUSE_STATE_ARCHIVED
    alice.call(alice.ledger.ResolveWarehouse, rs.ResolveWarehouseRequest(warehouse_id=warehouse_id))

    alice.call(
        alice.warehouses.DeleteWarehouse, ws.DeleteWarehouseRequest(warehouse_id=warehouse_id)
    )
    gone = refused(
        lambda: alice.call(
            alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
        )
    )
    assert gone.code() == grpc.StatusCode.NOT_FOUND
    gone = refused(
        lambda: alice.call(
            alice.ledger.ResolveWarehouse, rs.ResolveWarehouseRequest(warehouse_id=warehouse_id)
        )
    )
    assert gone.code() == grpc.StatusCode.NOT_FOUND


def test_list_execution_records_pages_newest_first_with_filters(
    alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    ids = [new_id() for _ in range(5)]
    for execution_id in ids:
        bind(alice, execution_id, warehouse_id, unit)
    report(unit, ids[0], EX.EXECUTION_STATE_RUNNING)
    seen: list[str] = []
    token = ""
    while True:
        page = listed(unit, alice, page_size=2, page_token=token, warehouse_id=warehouse_id)
        seen += [e.execution_id for e in page.executions]
        if not (token := page.next_page_token):
            break
    assert seen == list(reversed(ids))
    running = listed(unit, alice, states=[EX.EXECUTION_STATE_RUNNING])
    assert [e.execution_id for e in running.executions] == [ids[0]]


def test_units_heartbeat_and_lose_their_executions_when_the_lease_lapses(
    stack: Stack, alice: RegistryClient, warehouse_id: str
) -> None:
    unit = computing_unit(stack, register_unit(stack, shared_with=(alice.subject,)))
    beat = unit.call(
        unit.leases.HeartbeatComputingUnit,
        rs.HeartbeatComputingUnitRequest(computing_unit_id=unit.subject, running_executions=1),
    )
    assert beat.registration.state == rs.UNIT_REGISTRATION_STATE_HEALTHY
    assert beat.registration.running_executions == 1
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)

    # No more heartbeats: the test stack's lease is 6 s and the sweep runs every second.
    deadline = time.monotonic() + 20
    while True:
        state = alice.call(
            alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
        )
        if state.execution.state == EX.EXECUTION_STATE_FAILED or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert state.execution.state == EX.EXECUTION_STATE_FAILED
    assert state.execution.error.reason == "COMPUTING_UNIT_LOST"
    assert unit.subject in state.execution.error.message

    # No launcher knows this unit: once its lease lapsed the registry fails it, and with it
    # every credential of its launch. (A launched unit whose process lives gets NOT_FOUND and
    # registers again: see test_resource_limits.)
    eventually(
        lambda: (
            _in_database(stack, "SELECT state FROM units WHERE unit_id = $1", unit.subject)["state"]
            == "FAILED"
        ),
        "the registry failed the unit",
    )
    late = refused(
        lambda: unit.call(
            unit.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(computing_unit_id=unit.subject),
        )
    )
    assert late.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(late)[0] == "UNIT_CREDENTIAL_REVOKED"
    assert unit.subject not in healthy_units(stack)
    register_unit(stack, unit.subject)  # launched again
    assert unit.subject in healthy_units(stack)


def _in_database(stack: Stack, query: str, *args: Any) -> Any:
    """One row of a query on the registry's database."""

    async def run() -> Any:
        connection = await asyncpg.connect(stack.database_url)
        try:
            return await connection.fetchrow(query, *args)
        finally:
            await connection.close()

    return asyncio.run(run())


def test_a_lease_that_lapses_under_the_sweeps_hold_is_swept_once_the_hold_passed(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    """What follows an outage of the registry's database (see warehouse_service.background.leases): a
    hold, during which neither the sweep nor the unit supervisor takes a lapsed lease for a
    lost unit; once it has passed, the unit is lost as any other."""
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    report(unit, execution_id, EX.EXECUTION_STATE_RUNNING)
    lease = float(TEST_STACK_ENV["TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS"])
    hold_until = _in_database(
        stack,
        "UPDATE lease_sweep_hold SET hold_until = greatest(hold_until, "
        "now() + make_interval(secs => $1)) RETURNING hold_until",
        2 * lease + 2,
    )["hold_until"]

    # No more heartbeats: the lease lapses after 6 s, the hold after 14.
    lapsed_while_held = False
    while True:
        now = _in_database(
            stack,
            "SELECT now() < $1 AS held, lease_expires_at < now() AS lapsed, "
            "(SELECT state FROM executions WHERE execution_id = $3) AS state "
            "FROM computing_units WHERE computing_unit_id = $2",
            hold_until,
            unit.subject,
            execution_id,
        )
        if not now["held"]:
            break
        assert now["state"] == "RUNNING"
        lapsed_while_held |= now["lapsed"]
        time.sleep(0.5)
    assert lapsed_while_held

    deadline = time.monotonic() + 10
    while True:
        state = alice.call(
            alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
        ).execution
        if state.state == EX.EXECUTION_STATE_FAILED or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert state.state == EX.EXECUTION_STATE_FAILED
    assert state.error.reason == "COMPUTING_UNIT_LOST"
    assert unit.subject not in healthy_units(stack)


def test_a_restarted_unit_fails_what_it_ran_before(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    execution_id = new_id()
    bind(alice, execution_id, warehouse_id, unit)
    register_unit(stack, unit.subject)
    state = alice.call(
        alice.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=execution_id)
    )
    assert state.execution.error.reason == "COMPUTING_UNIT_RESTARTED"


def healthy_units(stack: Stack) -> list[str]:
    gateway = gateway_account(stack)
    listed = gateway.call(
        gateway.leases.ListUnitRegistrations, rs.ListUnitRegistrationsRequest(healthy_only=True)
    )
    return [u.computing_unit_id for u in listed.registrations]


def test_units_are_listed_least_loaded_first(stack: Stack) -> None:
    busy, idle = register_unit(stack, capacity=2), register_unit(stack, capacity=8)
    client = computing_unit(stack, busy)
    client.call(
        client.leases.HeartbeatComputingUnit,
        rs.HeartbeatComputingUnitRequest(computing_unit_id=busy, running_executions=2),
    )
    listed = healthy_units(stack)
    assert listed.index(idle) < listed.index(busy)


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        (rs.RegisterComputingUnitRequest(), {"computing_unit_id", "endpoint", "capacity"}),
        (
            rs.RegisterComputingUnitRequest(
                computing_unit_id="cu-x", endpoint="no port", capacity=1
            ),
            {"endpoint"},
        ),
        (
            rs.RegisterComputingUnitRequest(computing_unit_id="cu x", endpoint="h:1", capacity=0),
            {"computing_unit_id", "capacity"},
        ),
    ],
    ids=["empty", "endpoint", "id and capacity"],
)
def test_registration_names_bad_fields(stack: Stack, request_: Any, fields: set[str]) -> None:
    record_unit(stack, "cu-x", "unit-owner")
    unit = computing_unit(stack, "cu-x")
    error = refused(lambda: unit.call(unit.leases.RegisterComputingUnit, request_))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == fields


LEDGER_BAD_INPUT: list[
    tuple[str, Callable[[RegistryClient, RegistryClient, RegistryClient], Any], set[str]]
] = [
    (
        "BindExecution",
        lambda user_, unit_, service_: unit_.for_user(user_).call(
            unit_.ledger.BindExecution, rs.BindExecutionRequest(execution_id="bad id")
        ),
        {"execution_id", "warehouse_id", "computing_unit_id"},
    ),
    (
        "UpdateExecutionState",
        lambda user_, unit_, service_: unit_.call(
            unit_.ledger.UpdateExecutionState,
            rs.UpdateExecutionStateRequest(
                execution_id="",
                computing_unit_id=unit_.subject,
                state=99,  # type: ignore[arg-type]
            ),
        ),
        {"execution_id", "state"},
    ),
    (
        "ResolveExecution",
        lambda user_, unit_, service_: user_.call(
            user_.ledger.ResolveExecution, rs.ResolveExecutionRequest()
        ),
        {"execution_id"},
    ),
    (
        "ResolveWarehouse",
        lambda user_, unit_, service_: user_.call(
            user_.ledger.ResolveWarehouse, rs.ResolveWarehouseRequest(warehouse_id="w")
        ),
        {"warehouse_id"},
    ),
    (
        "ListExecutionRecords",
        lambda user_, unit_, service_: unit_.for_user(user_).call(
            unit_.ledger.ListExecutionRecords,
            rs.ListExecutionRecordsRequest(page_size=-5, warehouse_id="w"),
        ),
        {"page_size"},
    ),
    (
        "HeartbeatComputingUnit",
        lambda user_, unit_, service_: unit_.call(
            unit_.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(
                computing_unit_id=unit_.subject, running_executions=-1
            ),
        ),
        {"running_executions"},
    ),
    (
        "HeartbeatComputingUnit",
        lambda user_, unit_, service_: unit_.call(
            unit_.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(
                computing_unit_id=unit_.subject, unfinished_execution_ids=[new_id(), "bad id"]
            ),
        ),
        {"unfinished_execution_ids[1]"},
    ),
    (
        "HeartbeatComputingUnit",
        lambda user_, unit_, service_: unit_.call(
            unit_.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(
                computing_unit_id=unit_.subject,
                unfinished_execution_ids=[new_id() for _ in range(1001)],
            ),
        ),
        {"unfinished_execution_ids"},
    ),
    (
        "ListUnitRegistrations",
        lambda user_, unit_, service_: service_.call(
            service_.leases.ListUnitRegistrations,
            rs.ListUnitRegistrationsRequest(page_token="forged"),
        ),
        {"page_token"},
    ),
]


@pytest.mark.parametrize(
    ("method", "call", "fields"),
    LEDGER_BAD_INPUT,
    ids=[f"{m}-{'-'.join(sorted(f))}" for m, _, f in LEDGER_BAD_INPUT],
)
def test_ledger_methods_name_bad_fields(
    stack: Stack,
    alice: RegistryClient,
    unit: RegistryClient,
    method: str,
    call: Callable[..., Any],
    fields: set[str],
) -> None:
    error = refused(lambda: call(alice, unit, gateway_account(stack)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == fields


def test_internal_methods_refuse_users_tokens(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    """A user cannot bind (and so leave ghost bindings that block its warehouse's deletion),
    report, register, heartbeat or list registrations, even with the internal token the gateway
    mints for it (its Texera token is refused by every service but the gateway)."""
    calls = [
        lambda: alice.call(
            alice.ledger.BindExecution,
            rs.BindExecutionRequest(
                execution_id=new_id(), warehouse_id=warehouse_id, computing_unit_id=unit.subject
            ),
        ),
        lambda: alice.call(
            alice.ledger.UpdateExecutionState,
            rs.UpdateExecutionStateRequest(
                execution_id=new_id(),
                computing_unit_id=unit.subject,
                state=EX.EXECUTION_STATE_RUNNING,
            ),
        ),
        lambda: alice.call(
            alice.leases.RegisterComputingUnit,
            rs.RegisterComputingUnitRequest(
                computing_unit_id=alice.subject, endpoint="127.0.0.1:1", capacity=1
            ),
        ),
        lambda: alice.call(
            alice.leases.HeartbeatComputingUnit,
            rs.HeartbeatComputingUnitRequest(computing_unit_id=alice.subject),
        ),
        lambda: alice.call(alice.leases.ListUnitRegistrations, rs.ListUnitRegistrationsRequest()),
        # A unit may not list registrations either: it acts only for itself.
        lambda: unit.call(unit.leases.ListUnitRegistrations, rs.ListUnitRegistrationsRequest()),
    ]
    for call in calls:
        assert refused(call).code() == grpc.StatusCode.PERMISSION_DENIED
    alice.call(
        alice.warehouses.DeleteWarehouse, ws.DeleteWarehouseRequest(warehouse_id=warehouse_id)
    )


def test_a_unit_binds_only_for_itself_and_for_users_allowed_on_it(
    stack: Stack, alice: RegistryClient, warehouse_id: str, unit: RegistryClient
) -> None:
    mallory = user(stack, f"mallory-{uuid.uuid4().hex[:6]}")
    # Not shared with mallory: as if the unit did not exist.
    assert refused(lambda: bind(mallory, new_id(), warehouse_id, unit)).code() == (
        grpc.StatusCode.NOT_FOUND
    )
    # Shared with alice, but the unit names another unit in the request.
    other = register_unit(stack, shared_with=(alice.subject,))
    request = rs.BindExecutionRequest(
        execution_id=new_id(), warehouse_id=warehouse_id, computing_unit_id=other
    )
    acting = unit.for_user(alice)
    assert refused(lambda: acting.call(acting.ledger.BindExecution, request)).code() == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    # Without the user it acts for, a unit cannot bind at all.
    assert refused(lambda: unit.call(unit.ledger.BindExecution, request)).code() == (
        grpc.StatusCode.PERMISSION_DENIED
    )
