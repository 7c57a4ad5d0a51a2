"""Shared warehouses through the gateway, as users call it: the owner, a READER, a WRITER and
a stranger against every public method that touches a warehouse or the executions in it; and
a role taken back or lowered applies to the very next call."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from embedded_stack.stack import Stack
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    UnitClient,
    filtered_numbers,
    share_unit,
)
from tests.integration.mesh import (
    BIN,
    Metadata,
    bad_fields,
    bearer,
    create_request,
    reason,
    refused,
)
from tests.integration.results import ResultClient, arrow_table
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    result_pb2,
    result_service_pb2_grpc,
    warehouse_pb2,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

pytestmark = pytest.mark.integration

ws = warehouse_service_pb2
READER, WRITER, OWNER = (
    warehouse_pb2.WAREHOUSE_ROLE_READER,
    warehouse_pb2.WAREHOUSE_ROLE_WRITER,
    warehouse_pb2.WAREHOUSE_ROLE_OWNER,
)
#: Rows of the workflow every execution here runs: the even numbers below 40.
KEPT = 20


@dataclass
class Caller:
    """One user calling the gateway's services with its own Texera token."""

    user_id: str
    warehouses: warehouse_service_pb2_grpc.WarehouseServiceStub
    executions: UnitClient
    results: ResultClient
    metadata: Metadata

    def call(self, method: str, request: Any) -> Any:
        return getattr(self.warehouses, method)(request, metadata=self.metadata, timeout=120)


def caller(stack: Stack, channel: grpc.Channel, user_id: str, unit_id: str) -> Caller:
    """user_id at the gateway; its submissions go to the tests' shared unit, shared with it."""
    share_unit(stack, unit_id, SHARED_UNIT_OWNER, user_id)
    metadata = bearer(stack.token(user_id))
    return Caller(
        user_id,
        warehouse_service_pb2_grpc.WarehouseServiceStub(channel),
        UnitClient(
            execution_service_pb2_grpc.ExecutionServiceStub(channel), metadata, unit_id, user_id
        ),
        ResultClient(result_service_pb2_grpc.ResultServiceStub(channel), metadata),
        metadata,
    )


def member(user_id: str, role: int) -> warehouse_pb2.WarehouseMember:
    return warehouse_pb2.WarehouseMember(user_id=user_id, role=role)  # type: ignore[arg-type]


def share(owner: Caller, warehouse_id: str, user_id: str, role: int) -> ws.ShareWarehouseResponse:
    answer: ws.ShareWarehouseResponse = owner.call(
        "ShareWarehouse",
        ws.ShareWarehouseRequest(warehouse_id=warehouse_id, member=member(user_id, role)),
    )
    return answer


def unshare(owner: Caller, warehouse_id: str, user_id: str) -> None:
    owner.call(
        "UnshareWarehouse", ws.UnshareWarehouseRequest(warehouse_id=warehouse_id, user_id=user_id)
    )


def run(person: Caller, warehouse_id: str) -> execution_pb2.Execution:
    execution = person.executions.submit(warehouse_id, filtered_numbers(40, 2, "id % 2 = 0"))
    finished = person.executions.finish(execution.execution_id)
    assert finished.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, finished.error
    return finished


@dataclass
class Shared:
    """A warehouse of owner's, shared with reader and writer, and an execution in it."""

    stack: Stack
    warehouse_id: str
    owner: Caller
    reader: Caller
    writer: Caller
    stranger: Caller
    execution_id: str
    make: Callable[[str], Caller]

    def everyone(self) -> dict[str, Caller]:
        return {
            "owner": self.owner,
            "reader": self.reader,
            "writer": self.writer,
            "stranger": self.stranger,
        }


@pytest.fixture(scope="module")
def shared(stack: Stack) -> Iterator[Shared]:
    unit_id = stack.unit_for(SHARED_UNIT_OWNER).unit_id
    channel = stack.channel("gateway", presenting=None)
    suffix = uuid.uuid4().hex[:6]

    def make(name: str) -> Caller:
        return caller(stack, channel, f"{name}-{suffix}", unit_id)

    owner, reader, writer, stranger = (make(n) for n in ("owner", "reader", "writer", "stranger"))
    grant = stack.provision_bucket("shared")
    created = owner.call("CreateWarehouse", create_request(grant, name="shared")).warehouse
    share(owner, created.warehouse_id, reader.user_id, READER)
    share(owner, created.warehouse_id, writer.user_id, WRITER)
    execution = run(owner, created.warehouse_id)
    yield Shared(
        stack,
        created.warehouse_id,
        owner,
        reader,
        writer,
        stranger,
        execution.execution_id,
        make,
    )
    channel.close()


def _denied(error: grpc.RpcError) -> None:
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert reason(error) == "WAREHOUSE_ROLE_INSUFFICIENT"


def _hidden(error: grpc.RpcError, what: str) -> None:
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    assert reason(error) == f"{what}_NOT_FOUND"


# Seeing the warehouse --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "role"), [("owner", OWNER), ("reader", READER), ("writer", WRITER)]
)
def test_owner_and_members_see_the_warehouse_with_their_role(
    shared: Shared, who: str, role: int
) -> None:
    person = shared.everyone()[who]
    got = person.call("GetWarehouse", ws.GetWarehouseRequest(warehouse_id=shared.warehouse_id))
    assert got.warehouse.owner_user_id == shared.owner.user_id
    assert got.warehouse.caller_role == role
    listed = person.call("ListWarehouses", ws.ListWarehousesRequest())
    roles = {w.warehouse_id: w.caller_role for w in listed.warehouses}
    assert roles[shared.warehouse_id] == role


def test_a_stranger_does_not_learn_the_warehouse_exists(shared: Shared) -> None:
    stranger = shared.stranger
    error = refused(
        lambda: stranger.call(
            "GetWarehouse", ws.GetWarehouseRequest(warehouse_id=shared.warehouse_id)
        )
    )
    _hidden(error, "WAREHOUSE")
    listed = stranger.call("ListWarehouses", ws.ListWarehousesRequest())
    assert shared.warehouse_id not in {w.warehouse_id for w in listed.warehouses}


def test_the_owner_lists_the_members(shared: Shared) -> None:
    listed = shared.owner.call(
        "ListWarehouseMembers", ws.ListWarehouseMembersRequest(warehouse_id=shared.warehouse_id)
    )
    granted = {m.user_id: m.role for m in listed.members}
    assert granted == {shared.reader.user_id: READER, shared.writer.user_id: WRITER}
    assert {m.granted_by_user_id for m in listed.members} == {shared.owner.user_id}
    assert all(m.grant_time.seconds for m in listed.members)


# Submitting into it ------------------------------------------------------------------------


def test_a_writer_runs_executions_into_the_owners_warehouse(shared: Shared) -> None:
    execution = run(shared.writer, shared.warehouse_id)
    assert execution.warehouse_id == shared.warehouse_id
    assert execution.owner_user_id == shared.writer.user_id
    # The owner reads what the writer wrote: the data is in the owner's warehouse.
    rows, _ = shared.owner.results.all_rows(execution.execution_id, "kept")
    assert len(rows) == KEPT


def test_a_reader_cannot_submit(shared: Shared) -> None:
    error = refused(
        lambda: shared.reader.executions.submit(
            shared.warehouse_id, filtered_numbers(4, 1, "id > 0")
        )
    )
    _denied(error)


def test_a_stranger_cannot_submit(shared: Shared) -> None:
    error = refused(
        lambda: shared.stranger.executions.submit(
            shared.warehouse_id, filtered_numbers(4, 1, "id > 0")
        )
    )
    _hidden(error, "WAREHOUSE")


# Reading the executions in it ----------------------------------------------------------------


def _reads(person: Caller, execution_id: str) -> dict[str, Callable[[], Any]]:
    """Every read of an execution's results, snapshots, statistics and console messages."""
    results = person.results

    def time_travel() -> Any:
        first = results.snapshots(execution_id, "kept")[0]
        by_id = results.page(
            execution_id,
            "kept",
            snapshot=result_pb2.SnapshotSelector(snapshot_id=first.snapshot_id),
        )
        as_of = results.page(
            execution_id, "kept", snapshot=result_pb2.SnapshotSelector(as_of_time=first.commit_time)
        )
        return by_id.snapshot_id, as_of.snapshot_id

    return {
        "ListResults": lambda: [r.operator_id for r in results.list_results(execution_id).results],
        "GetResult": lambda: results.get(execution_id, "kept").row_count,
        "ReadResultPage": lambda: len(results.all_rows(execution_id, "kept")[0]),
        "StreamResult": lambda: arrow_table(results.stream(execution_id, "kept")).num_rows,
        "ListSnapshots": lambda: len(results.snapshots(execution_id, "kept")) > 0,
        "time travel": time_travel,
        "ListRuntimeStatistics": lambda: bool(results.statistics(execution_id).statistics),
        "ListConsoleMessages": lambda: len(results.console(execution_id).messages),
        "GetExecution": lambda: person.executions.get(execution_id).state,
        "WatchExecution": lambda: [e.state for e in person.executions.watch(execution_id, 60)],
    }


READS = [
    "ListResults",
    "GetResult",
    "ReadResultPage",
    "StreamResult",
    "ListSnapshots",
    "time travel",
    "ListRuntimeStatistics",
    "ListConsoleMessages",
    "GetExecution",
    "WatchExecution",
]


@pytest.mark.parametrize("read", READS)
def test_readers_and_writers_read_what_the_owner_reads(shared: Shared, read: str) -> None:
    expected = _reads(shared.owner, shared.execution_id)[read]()
    for who in (shared.reader, shared.writer):
        assert _reads(who, shared.execution_id)[read]() == expected, who.user_id


@pytest.mark.parametrize("read", READS)
def test_a_stranger_reads_nothing(shared: Shared, read: str) -> None:
    error = refused(_reads(shared.stranger, shared.execution_id)[read])
    _hidden(error, "EXECUTION")


def listed(person: Caller, warehouse_id: str = "") -> set[str]:
    """The executions person lists, of one warehouse or (without) its own."""
    request = execution_service_pb2.ListExecutionsRequest(warehouse_id=warehouse_id)
    answer = person.executions.stub.ListExecutions(request, metadata=person.metadata, timeout=60)
    return {e.execution_id for e in answer.executions}


def test_members_list_the_warehouses_executions(shared: Shared) -> None:
    assert shared.execution_id in listed(shared.reader, shared.warehouse_id)
    assert listed(shared.reader, shared.warehouse_id) == listed(shared.owner, shared.warehouse_id)
    assert listed(shared.stranger, shared.warehouse_id) == set()


@pytest.mark.parametrize("who", ["reader", "writer", "stranger"])
def test_only_the_submitter_cancels(shared: Shared, who: str) -> None:
    person = shared.everyone()[who]
    error = refused(lambda: person.executions.cancel(shared.execution_id))
    if who == "stranger":
        _hidden(error, "EXECUTION")
    else:
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        assert reason(error) == "EXECUTION_SUBMITTER_ONLY"


# Owner-only methods --------------------------------------------------------------------------


def _owner_only(shared: Shared, person: Caller) -> dict[str, Callable[[], Any]]:
    warehouse_id = shared.warehouse_id
    return {
        "ArchiveWarehouse": lambda: person.call(
            "ArchiveWarehouse", ws.ArchiveWarehouseRequest(warehouse_id=warehouse_id)
        ),
        "RestoreWarehouse": lambda: person.call(
            "RestoreWarehouse", ws.RestoreWarehouseRequest(warehouse_id=warehouse_id)
        ),
        "DeleteWarehouse": lambda: person.call(
            "DeleteWarehouse",
            ws.DeleteWarehouseRequest(warehouse_id=warehouse_id, purge=True),
        ),
        "RotateWarehouseCredentials": lambda: person.call(
            "RotateWarehouseCredentials",
            ws.RotateWarehouseCredentialsRequest(
                warehouse_id=warehouse_id,
                credentials=warehouse_pb2.S3Credentials(
                    access_key_id="AKIAEXAMPLE", secret_access_key="never-used"
                ),
            ),
        ),
        "ShareWarehouse": lambda: share(person, warehouse_id, "someone-else", READER),
        "UnshareWarehouse": lambda: unshare(person, warehouse_id, shared.reader.user_id),
        "ListWarehouseMembers": lambda: person.call(
            "ListWarehouseMembers", ws.ListWarehouseMembersRequest(warehouse_id=warehouse_id)
        ),
    }


OWNER_ONLY = [
    "ArchiveWarehouse",
    "RestoreWarehouse",
    "DeleteWarehouse",
    "RotateWarehouseCredentials",
    "ShareWarehouse",
    "UnshareWarehouse",
    "ListWarehouseMembers",
]


@pytest.mark.parametrize("method", OWNER_ONLY)
@pytest.mark.parametrize("who", ["reader", "writer"])
def test_members_may_not_do_what_is_the_owners(shared: Shared, who: str, method: str) -> None:
    _denied(refused(_owner_only(shared, shared.everyone()[who])[method]))


@pytest.mark.parametrize("method", OWNER_ONLY)
def test_a_stranger_is_told_nothing_exists(shared: Shared, method: str) -> None:
    _hidden(refused(_owner_only(shared, shared.stranger)[method]), "WAREHOUSE")


def test_a_delete_allowing_a_missing_warehouse_deletes_none_but_the_callers(
    shared: Shared,
) -> None:
    request = ws.DeleteWarehouseRequest(warehouse_id=shared.warehouse_id, allow_missing=True)
    # None of the stranger's: nothing to delete, and nothing is.
    assert not shared.stranger.call("DeleteWarehouse", request).HasField("warehouse")
    # A member's role does not allow it, missing or not.
    _denied(refused(lambda: shared.writer.call("DeleteWarehouse", request)))
    got = shared.owner.call(
        "GetWarehouse", ws.GetWarehouseRequest(warehouse_id=shared.warehouse_id)
    )
    assert got.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE


def test_owner_archives_and_restores_and_members_follow(shared: Shared) -> None:
    owner = shared.owner
    archived = owner.call(
        "ArchiveWarehouse", ws.ArchiveWarehouseRequest(warehouse_id=shared.warehouse_id)
    )
    try:
        assert archived.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_ARCHIVED
        # An archived warehouse refuses a writer's new execution, but stays readable.
        error = refused(
            lambda: shared.writer.executions.submit(
                shared.warehouse_id, filtered_numbers(4, 1, "id > 0")
            )
        )
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert len(shared.reader.results.all_rows(shared.execution_id, "kept")[0]) == KEPT
    finally:
        restored = owner.call(
            "RestoreWarehouse", ws.RestoreWarehouseRequest(warehouse_id=shared.warehouse_id)
        )
    assert restored.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_ACTIVE


def test_only_the_owner_deletes_and_members_lose_it(shared: Shared) -> None:
    owner, reader = shared.owner, shared.reader
    grant = shared.stack.provision_bucket("short")
    warehouse_id = owner.call(
        "CreateWarehouse", create_request(grant, name="short")
    ).warehouse.warehouse_id
    share(owner, warehouse_id, reader.user_id, WRITER)
    delete = ws.DeleteWarehouseRequest(warehouse_id=warehouse_id)
    _denied(refused(lambda: reader.call("DeleteWarehouse", delete)))
    deleted = owner.call("DeleteWarehouse", delete).warehouse
    assert deleted.state == warehouse_pb2.WAREHOUSE_STATE_DELETED
    error = refused(
        lambda: reader.executions.submit(warehouse_id, filtered_numbers(4, 1, "id > 0"))
    )
    _hidden(error, "WAREHOUSE")


# Sharing's own rules -------------------------------------------------------------------------


def test_sharing_again_changes_nothing_but_the_role(shared: Shared) -> None:
    first = share(shared.owner, shared.warehouse_id, shared.reader.user_id, READER).member
    again = share(shared.owner, shared.warehouse_id, shared.reader.user_id, READER).member
    assert again == first


@pytest.mark.parametrize(
    ("user_id", "role", "field"),
    [
        ("", READER, "member.user_id"),
        ("x" * 129, READER, "member.user_id"),
        ("someone", warehouse_pb2.WAREHOUSE_ROLE_UNSPECIFIED, "member.role"),
        ("someone", OWNER, "member.role"),
        ("someone", 9, "member.role"),
        ("<owner>", READER, "member.user_id"),
    ],
)
def test_bad_grants_name_the_field(shared: Shared, user_id: str, role: int, field: str) -> None:
    user_id = shared.owner.user_id if user_id == "<owner>" else user_id
    error = refused(lambda: share(shared.owner, shared.warehouse_id, user_id, role))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {field}


def test_unsharing_applies_to_the_next_call(shared: Shared) -> None:
    owner, guest = shared.owner, shared.make("guest")
    share(owner, shared.warehouse_id, guest.user_id, WRITER)
    assert len(guest.results.all_rows(shared.execution_id, "kept")[0]) == KEPT
    own = run(guest, shared.warehouse_id).execution_id
    assert listed(guest) == {own}

    # Lowered to READER: the next submission is refused, reads go on.
    share(owner, shared.warehouse_id, guest.user_id, READER)
    _denied(
        refused(
            lambda: guest.executions.submit(shared.warehouse_id, filtered_numbers(4, 1, "id > 0"))
        )
    )
    assert guest.results.get(shared.execution_id, "kept").row_count == KEPT

    unshare(owner, shared.warehouse_id, guest.user_id)
    _hidden(refused(lambda: guest.results.get(shared.execution_id, "kept")), "EXECUTION")
    # What the former writer wrote is the owner's: no longer the writer's to read or list.
    _hidden(refused(lambda: guest.results.get(own, "kept")), "EXECUTION")
    assert listed(guest) == set()
    assert owner.results.get(own, "kept").row_count == KEPT
    _hidden(
        refused(
            lambda: guest.call(
                "GetWarehouse", ws.GetWarehouseRequest(warehouse_id=shared.warehouse_id)
            )
        ),
        "WAREHOUSE",
    )
    # Unsharing again is a no-op.
    unshare(owner, shared.warehouse_id, guest.user_id)


def test_sharing_from_the_command_line(shared: Shared) -> None:
    def cli(user_id: str, *args: str) -> str:
        return subprocess.run(
            [
                str(BIN / "texera-lake"),
                *("--state-dir", str(shared.stack.state_dir), "--user", user_id),
                *("warehouse", *args),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    owner, guest = shared.owner.user_id, f"cli-{uuid.uuid4().hex[:6]}"
    granted = json.loads(cli(owner, "share", shared.warehouse_id, guest, "--role", "writer"))
    assert granted["role"] == "WAREHOUSE_ROLE_WRITER"
    assert [guest, "writer"] in [
        line.split()[:2] for line in cli(owner, "members", shared.warehouse_id).splitlines()
    ]
    listed = [line.split() for line in cli(guest, "list").splitlines()]
    assert [row[-1] for row in listed if row[0] == shared.warehouse_id] == ["writer"]
    cli(owner, "unshare", shared.warehouse_id, guest)
    assert shared.warehouse_id not in cli(guest, "list")


def test_members_page_by_user_id(shared: Shared) -> None:
    owner = shared.owner
    grant = shared.stack.provision_bucket("paged")
    warehouse_id = owner.call(
        "CreateWarehouse", create_request(grant, name="paged")
    ).warehouse.warehouse_id
    users = sorted(f"member-{index}-{uuid.uuid4().hex[:4]}" for index in range(5))
    for user_id in users:
        share(owner, warehouse_id, user_id, READER)
    seen, token, pages = [], "", 0
    while True:
        page = owner.call(
            "ListWarehouseMembers",
            ws.ListWarehouseMembersRequest(
                warehouse_id=warehouse_id, page_size=2, page_token=token
            ),
        )
        seen += [m.user_id for m in page.members]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert (seen, pages) == (users, 3)
    # A token belongs to its warehouse's listing.
    first = owner.call(
        "ListWarehouseMembers",
        ws.ListWarehouseMembersRequest(warehouse_id=warehouse_id, page_size=2),
    )
    error = refused(
        lambda: owner.call(
            "ListWarehouseMembers",
            ws.ListWarehouseMembersRequest(
                warehouse_id=shared.warehouse_id, page_size=2, page_token=first.next_page_token
            ),
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"page_token"}
