"""The result service: outputs, pages, streams, snapshots, time travel, statistics and logs,
read back from executions the computing unit wrote into each user's own warehouse."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pyarrow as pa
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from embedded_stack.stack import Stack
from lake_client.result_stream import ResultStream
from service_runtime.execution_states import state_name
from tests.integration.executions import UnitClient, new_user, udf, unit_as, workflow
from tests.integration.mesh import bad_fields, refused, user
from tests.integration.metrics_scrape import scrape
from tests.integration.results import ResultClient, arrow_table, first_commit, results_like
from texera.lake.v1 import execution_pb2, result_pb2, result_service_pb2, warehouse_service_pb2

pytestmark = pytest.mark.integration

ROWS = 100_000
WIDE_ROWS = 200_000
PARTITIONS = 8

TYPED_COLUMNS = [
    {"name": "big", "data_type": "bigint"},
    {"name": "price", "data_type": "decimal(12,3)"},
    {"name": "ratio", "data_type": "double"},
    {"name": "day", "data_type": "date"},
    {"name": "at_utc", "data_type": "timestamp"},
    {"name": "at_local", "data_type": "timestamp_ntz"},
    {"name": "blob", "data_type": "binary"},
    {"name": "tags", "data_type": "array<string>"},
    {"name": "point", "data_type": "struct<x:int,label:string>"},
    {"name": "scores", "data_type": "map<string,int>"},
]
TYPED_ROWS = [
    [
        str(2**60 + 1),  # a JSON number would lose precision on the way in
        "1234.500",
        0.25,
        "2024-02-29",
        "2024-03-01T12:30:00.123456+02:00",
        "2024-03-01T12:30:00.5",
        base64.b64encode(b"\x00\xffbin").decode(),
        ["a", None, "c"],
        {"x": 7, "label": "seven"},
        {"k": 1},
    ],
    [12, "-0.001", None, None, None, None, None, [], None, {}],
]


@dataclass(frozen=True)
class Finished:
    """A user's succeeded execution and the clients to read it."""

    unit: UnitClient
    results: ResultClient
    execution: execution_pb2.Execution
    warehouse_id: str

    @property
    def execution_id(self) -> str:
        return self.execution.execution_id


def _run(stack: Stack, name: str, operators: list[dict[str, Any]]) -> Finished:
    unit, warehouse_id, _ = new_user(stack, name)
    execution = unit.finish(unit.submit(warehouse_id, workflow(operators)).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    return Finished(unit, results_like(stack, unit), execution, warehouse_id)


@pytest.fixture(scope="module")
def finished(stack: Stack) -> Finished:
    """One execution with three results: numbers (100,000 rows in 8 files), a filtered view of
    them, and rows of many types; and a UDF that prints."""
    return _run(
        stack,
        "reader",
        [
            {
                "operator_id": "numbers",
                "range_source": {"end": ROWS, "partitions": PARTITIONS},
                "materialize": True,
            },
            {
                "operator_id": "labelled",
                "input_operator_ids": ["numbers"],
                "projection": {
                    "columns": [
                        {"expression": "id"},
                        {"expression": "id % 10", "alias": "digit"},
                        {"expression": "concat('n', id)", "alias": "label"},
                    ]
                },
                "materialize": True,
            },
            {
                "operator_id": "typed",
                "inline_source": {"columns": TYPED_COLUMNS, "rows": TYPED_ROWS},
                "materialize": True,
            },
            {
                "operator_id": "talker",
                "input_operator_ids": ["typed"],
                "python_udf": udf(
                    "def process(batches):\n"
                    "    for batch in batches:\n"
                    "        print('saw', batch.num_rows, 'rows')\n"
                    "        yield batch.select(['big'])\n",
                    [("big", "bigint")],
                ),
                "materialize": True,
            },
        ],
    )


def _metric(stack: Stack, name: str) -> float:
    text = scrape(stack, "result-service")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [int(row["id"]) for row in rows]


# Results ----------------------------------------------------------------------------


def test_results_are_listed_with_schema_rows_and_snapshot(finished: Finished) -> None:
    listed = finished.results.list_results(finished.execution_id).results
    assert [r.operator_id for r in listed] == ["labelled", "numbers", "talker", "typed"]
    by_operator = {r.operator_id: r for r in listed}
    recorded = {o.operator_id: o for o in finished.execution.outputs}
    for operator_id, result in by_operator.items():
        assert result.snapshot_id == recorded[operator_id].snapshot_id
        assert result.row_count == recorded[operator_id].row_count
        assert result.table_name == recorded[operator_id].table_name
        assert result.HasField("commit_time")
    numbers = by_operator["numbers"]
    assert numbers.row_count == ROWS
    assert numbers.file_count == PARTITIONS
    assert numbers.total_bytes > 0
    assert [(c.name, c.iceberg_type, c.arrow_type) for c in numbers.columns] == [
        ("id", "long", "int64")
    ]
    typed = {c.name: (c.iceberg_type, c.arrow_type) for c in by_operator["typed"].columns}
    assert typed["price"] == ("decimal(12, 3)", "decimal128(12, 3)")
    assert typed["at_utc"] == ("timestamptz", "timestamp[us, tz=UTC]")
    assert typed["at_local"] == ("timestamp", "timestamp[us]")
    assert typed["tags"][0] == "list<string>"
    assert typed["scores"][0] == "map<string, int>"

    first = finished.results.list_results(finished.execution_id, page_size=3)
    assert len(first.results) == 3
    rest = finished.results.list_results(
        finished.execution_id, page_size=3, page_token=first.next_page_token
    )
    assert [r.operator_id for r in rest.results] == ["typed"]
    assert rest.next_page_token == ""

    got = finished.results.get(finished.execution_id, "numbers")
    assert got == numbers


def test_json_rows_keep_every_value_exactly(finished: Finished) -> None:
    page = finished.results.page(finished.execution_id, "typed")
    assert [c.name for c in page.columns] == [c["name"] for c in TYPED_COLUMNS]
    rows = finished.results.rows(finished.execution_id, "typed")
    assert rows[0] == {
        "big": str(2**60 + 1),
        "price": "1234.500",
        "ratio": 0.25,
        "day": "2024-02-29",
        "at_utc": "2024-03-01T10:30:00.123456Z",
        "at_local": "2024-03-01T12:30:00.500000",
        "blob": base64.b64encode(b"\x00\xffbin").decode(),
        "tags": ["a", None, "c"],
        "point": {"x": 7.0, "label": "seven"},
        "scores": {"k": 1.0},
    }
    assert rows[1]["big"] == 12.0
    assert rows[1]["price"] == "-0.001"
    assert rows[1]["ratio"] is None
    assert rows[1]["tags"] == []


def test_pages_project_filter_and_chain_without_gaps(finished: Finished) -> None:
    rows = finished.results.rows(
        finished.execution_id,
        "labelled",
        columns=["label", "id"],
        filter="digit == 3 and id < 100",
    )
    assert rows == [{"label": f"n{i}", "id": float(i)} for i in range(3, 100, 10)]

    every, snapshots = finished.results.all_rows(finished.execution_id, "numbers", page_size=7_001)
    assert _ids(every) == list(range(ROWS))
    assert len(snapshots) == 1

    filtered, _ = finished.results.all_rows(
        finished.execution_id, "labelled", filter="digit == 7", columns=["id"], page_size=999
    )
    assert _ids(filtered) == list(range(7, ROWS, 10))


def test_skipping_passes_over_whole_files_without_reading_them(
    finished: Finished, stack: Stack
) -> None:
    before = _metric(stack, "texera_lake_result_rows_read_total")
    rows = finished.results.rows(finished.execution_id, "numbers", skip=90_000, page_size=5)
    read = _metric(stack, "texera_lake_result_rows_read_total") - before
    assert _ids(rows) == list(range(90_000, 90_005))
    assert read <= ROWS / PARTITIONS  # one file at most, not the 90,000 rows skipped

    # A filter that the files' column statistics prove true for every row skips alike.
    before = _metric(stack, "texera_lake_result_rows_read_total")
    rows = finished.results.rows(
        finished.execution_id, "numbers", skip=90_000, page_size=5, filter="id >= 0"
    )
    assert _ids(rows) == list(range(90_000, 90_005))
    assert _metric(stack, "texera_lake_result_rows_read_total") - before <= ROWS / PARTITIONS

    # Otherwise matching rows are counted; the skip still lands on the right row.
    rows = finished.results.rows(
        finished.execution_id, "labelled", skip=1_000, page_size=3, filter="digit == 9"
    )
    assert _ids(rows) == [10_009, 10_019, 10_029]

    # A skip beyond the end gives an empty last page.
    page = finished.results.page(finished.execution_id, "numbers", skip=ROWS + 1)
    assert len(page.rows) == 0
    assert page.next_page_token == ""


def test_a_stream_is_one_arrow_ipc_stream_that_can_resume(stack: Stack, finished: Finished) -> None:
    messages = finished.results.stream(finished.execution_id, "labelled", max_batch_rows=10_000)
    table = arrow_table(messages)
    assert table.num_rows == ROWS
    assert table.column("id").to_pylist() == list(range(ROWS))
    assert table.schema.names == ["id", "digit", "label"]
    assert messages[0].row_count == 0  # the schema
    assert all(0 < m.row_count <= 10_000 for m in messages[1:-1])
    assert sum(m.row_count for m in messages) == ROWS
    assert messages[-1].resume_page_token == ""
    assert len({m.snapshot_id for m in messages}) == 1
    # Read in place by the Python client helper, it is the same table.
    with stack.channel("result-service") as channel:  # as the gateway
        request = result_service_pb2.StreamResultRequest(
            execution_id=finished.execution_id, operator_id="labelled", max_batch_rows=10_000
        )
        read = ResultStream(channel).read_all(request, metadata=finished.results.metadata)
    assert read == table

    # Every message's token resumes right after its rows, with a page or a stream.
    middle = messages[len(messages) // 2]
    sent_before = sum(m.row_count for m in messages[: len(messages) // 2 + 1])
    rows = finished.results.rows(
        finished.execution_id, "labelled", page_token=middle.resume_page_token, page_size=2
    )
    assert _ids(rows) == [sent_before, sent_before + 1]
    resumed = arrow_table(
        finished.results.stream(
            finished.execution_id, "labelled", page_token=middle.resume_page_token
        )
    )
    assert resumed.column("id").to_pylist() == list(range(sent_before, ROWS))


def test_a_stream_takes_projection_filter_skip_and_limit(finished: Finished) -> None:
    messages = finished.results.stream(
        finished.execution_id,
        "labelled",
        columns=["label"],
        filter="digit == 1",
        skip=10,
        limit=25,
    )
    table = arrow_table(messages)
    assert table.column("label").to_pylist() == [f"n{i}" for i in range(101, 351, 10)]
    assert messages[-1].resume_page_token != ""
    more = finished.results.rows(
        finished.execution_id,
        "labelled",
        columns=["label"],
        filter="digit == 1",
        page_token=messages[-1].resume_page_token,
        page_size=1,
    )
    assert more == [{"label": "n351"}]


@pytest.fixture(scope="module")
def wide(stack: Stack) -> Finished:
    """A result of WIDE_ROWS rows of about 210 bytes (42 MB in Arrow), larger than what flow
    control lets a stream send ahead on its two hops (result service to gateway to client)."""
    return _run(
        stack,
        "streamer",
        [
            {"operator_id": "n", "range_source": {"end": WIDE_ROWS, "partitions": 8}},
            {
                "operator_id": "wide",
                "input_operator_ids": ["n"],
                "projection": {
                    "columns": [
                        {"expression": "id"},
                        {"expression": "lpad(cast(id AS STRING), 200, 'x')", "alias": "text"},
                    ]
                },
                "materialize": True,
            },
        ],
    )


def test_a_cancelled_stream_stops_reading(stack: Stack, wide: Finished) -> None:
    before = _metric(stack, "texera_lake_result_rows_read_total")
    stream = wide.results.open_stream(wide.execution_id, "wide", max_batch_rows=1_000)
    assert next(stream).row_count == 0  # the schema
    assert next(stream).row_count == 1_000
    stream.cancel()
    read = _settled(lambda: _metric(stack, "texera_lake_result_rows_read_total")) - before
    assert read < WIDE_ROWS / 2
    time.sleep(1.0)
    assert _metric(stack, "texera_lake_result_rows_read_total") - before == read
    assert _metric(stack, "texera_lake_result_open_streams") == 0


def test_a_slow_client_holds_the_stream_back(stack: Stack, wide: Finished) -> None:
    before = _metric(stack, "texera_lake_result_streamed_rows_total")
    stream = wide.results.open_stream(wide.execution_id, "wide", max_batch_rows=1_000)
    next(stream)
    next(stream)  # then the client stops reading
    sent = _settled(lambda: _metric(stack, "texera_lake_result_streamed_rows_total")) - before
    # What flow control let out, not the whole result. Each hop's HTTP/2 window grows with
    # gRPC's bandwidth-delay probe, which on loopback may let out half of it or a bit more.
    assert sent < WIDE_ROWS * 3 / 4
    rest = sum(message.row_count for message in stream)  # the client catches up
    assert rest == WIDE_ROWS - 1_000


def _settled(read: Callable[[], float], quiet_seconds: float = 1.5, timeout: float = 60) -> float:
    """read()'s value once it has not changed for quiet_seconds."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        current = read()
        if current != value:
            value, since = current, time.monotonic()
        elif time.monotonic() - since >= quiet_seconds:
            return value
    raise AssertionError(f"still changing after {timeout} s")


# Snapshots and time travel ---------------------------------------------------------


def test_snapshots_and_time_travel_while_an_execution_appends(short_lived_stack: Stack) -> None:
    """The short-lived stack's unit commits after every wave of tasks, so a slow output gets
    one snapshot per wave; pages pinned to their first snapshot stay stable meanwhile."""
    unit, warehouse_id, _ = new_user(short_lived_stack, "appender")
    results = results_like(short_lived_stack, unit)
    slow = udf(
        "import time\n"
        "def process(batches):\n"
        "    for batch in batches:\n"
        "        time.sleep(0.4)\n"
        "        yield batch\n",
        [("id", "bigint")],
    )
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 48_000, "partitions": 48}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": slow,
                "materialize": True,
            },
        ]
    )
    execution = unit.submit(warehouse_id, flow)
    first_snapshot = first_commit(results, execution.execution_id, "slow")

    chains: list[tuple[list[int], set[int]]] = []
    while state_name(unit.get(execution.execution_id)) not in ("SUCCEEDED", "FAILED"):
        rows, snapshots = results.all_rows(execution.execution_id, "slow", page_size=1_500)
        chains.append((_ids(rows), snapshots))
    finished = unit.finish(execution.execution_id)
    assert state_name(finished) == "SUCCEEDED", finished.error
    assert any(len(ids) < 48_000 for ids, _ in chains)  # some chains ran while it appended

    for ids, snapshots in chains:  # each chain read one snapshot, every row of it once
        assert len(snapshots) == 1
        assert len(ids) == len(set(ids))
        (snapshot_id,) = snapshots
        expected = results.get(
            execution.execution_id,
            "slow",
            snapshot=result_pb2.SnapshotSelector(snapshot_id=snapshot_id),
        ).row_count
        assert len(ids) == expected

    listed = results.snapshots(execution.execution_id, "slow")
    assert len(listed) >= 2
    assert listed[0].snapshot_id == first_snapshot.snapshot_id
    assert [s.parent_snapshot_id for s in listed[1:]] == [s.snapshot_id for s in listed[:-1]]
    assert all(s.operation == "append" for s in listed)
    assert all(s.execution_id == execution.execution_id for s in listed)
    assert int(listed[-1].summary["total-records"]) == 48_000
    paged = results.snapshots(execution.execution_id, "slow", page_size=1)
    assert paged == listed[:1]

    # Reading at the first snapshot by id and by time gives the same, smaller result.
    at_first = result_pb2.SnapshotSelector(snapshot_id=first_snapshot.snapshot_id)
    by_id, _ = results.all_rows(execution.execution_id, "slow", snapshot=at_first)
    as_of = result_pb2.SnapshotSelector(as_of_time=first_snapshot.commit_time)
    by_time, _ = results.all_rows(execution.execution_id, "slow", snapshot=as_of)
    assert by_id == by_time
    assert 0 < len(by_id) < 48_000
    assert len(by_id) == int(first_snapshot.summary["total-records"])

    # Before the first snapshot there is nothing to read.
    before = Timestamp()
    before.FromMilliseconds(first_snapshot.commit_time.ToMilliseconds() - 1)
    error = refused(
        lambda: results.page(
            execution.execution_id, "slow", snapshot=result_pb2.SnapshotSelector(as_of_time=before)
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "first is from" in (error.details() or "")
    missing = refused(
        lambda: results.get(
            execution.execution_id, "slow", snapshot=result_pb2.SnapshotSelector(snapshot_id=42)
        )
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND


# Statistics and console messages ---------------------------------------------------


def test_statistics_and_console_messages(finished: Finished) -> None:
    statistics = finished.results.statistics(finished.execution_id).statistics
    assert {s.operator_id for s in statistics} == {"numbers", "labelled", "typed", "talker"}
    latest = finished.results.statistics(finished.execution_id, latest_only=True).statistics
    assert len(latest) == 4
    assert {s.state for s in latest} == {result_pb2.OPERATOR_STATE_COMPLETED}
    numbers = next(s for s in latest if s.operator_id == "numbers")
    assert numbers.output_rows == ROWS
    only = finished.results.statistics(finished.execution_id, operator_ids=["talker"])
    assert {s.operator_id for s in only.statistics} == {"talker"}
    one = finished.results.statistics(finished.execution_id, latest_only=True, page_size=3)
    rest = finished.results.statistics(
        finished.execution_id, latest_only=True, page_size=3, page_token=one.next_page_token
    )
    assert [s.operator_id for s in one.statistics] + [s.operator_id for s in rest.statistics] == [
        s.operator_id for s in latest
    ]

    messages = finished.results.console(finished.execution_id).messages
    printed = [m for m in messages if m.operator_id == "talker" and m.message.startswith("saw ")]
    assert sum(int(m.message.split()[1]) for m in printed) == len(TYPED_ROWS)
    assert all(m.level == result_pb2.CONSOLE_LEVEL_INFO for m in printed)
    assert any(m.operator_id == "" and "succeeded" in m.message for m in messages)
    warnings = finished.results.console(
        finished.execution_id, min_level=result_pb2.CONSOLE_LEVEL_WARNING
    )
    assert list(warnings.messages) == []
    paged = finished.results.console(finished.execution_id, page_size=1)
    assert len(paged.messages) == 1
    assert paged.next_page_token


# Bad input and other users --------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"execution_id": "no spaces"}, "execution_id"),
        ({"operator_id": ""}, "operator_id"),
        ({"page_size": -1}, "page_size"),
        ({"skip": -5}, "skip"),
        ({"columns": ["id", "nope"]}, "columns[1]"),
        ({"columns": ["id", "id"]}, "columns[1]"),
        ({"filter": "id >"}, "filter"),
        ({"filter": "missing == 1"}, "filter"),
        ({"filter": "label > 'x' and"}, "filter"),
        ({"page_token": "forged"}, "page_token"),
    ],
)
def test_bad_page_requests_name_the_field(
    finished: Finished, fields: dict[str, Any], bad: str
) -> None:
    request = {"execution_id": finished.execution_id, "operator_id": "labelled", **fields}
    error = refused(lambda: finished.results.page(**request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad in bad_fields(error)


def test_a_token_is_bound_to_its_request(finished: Finished) -> None:
    page = finished.results.page(finished.execution_id, "numbers", page_size=10)
    for other in ({"filter": "id > 5"}, {"columns": ["id"]}):
        error = refused(
            lambda other=other: finished.results.page(  # type: ignore[misc]
                finished.execution_id, "numbers", page_token=page.next_page_token, **other
            )
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in bad_fields(error)
    tampered = page.next_page_token[:-3] + (
        "AAA" if not page.next_page_token.endswith("AAA") else "BBB"
    )
    error = refused(
        lambda: finished.results.page(finished.execution_id, "numbers", page_token=tampered)
    )
    assert "page_token" in bad_fields(error)


def test_bad_stream_requests_fail_before_any_data(finished: Finished) -> None:
    for fields, bad in (
        ({"limit": -1}, "limit"),
        ({"max_batch_rows": -3}, "max_batch_rows"),
        ({"filter": "id = 'x'"}, "filter"),
    ):
        error = refused(
            lambda fields=fields: finished.results.stream(  # type: ignore[misc]
                finished.execution_id, "numbers", **fields
            )
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad in bad_fields(error)


@pytest.mark.parametrize(
    ("call", "bad"),
    [
        (lambda r, e: r.list_results(e, page_size=-1), "page_size"),
        (lambda r, e: r.list_results("bad id!"), "execution_id"),
        (lambda r, e: r.list_results(e, page_token="x.y"), "page_token"),
        (lambda r, e: r.get(e, "bad/op"), "operator_id"),
        (lambda r, e: r.snapshots(e, "numbers", page_size=-2), "page_size"),
        (lambda r, e: r.statistics(e, operator_ids=["ok", "not ok"]), "operator_ids[1]"),
        (lambda r, e: r.statistics(e, page_size=-1), "page_size"),
        (lambda r, e: r.console(e, min_level=99), "min_level"),
        (lambda r, e: r.console(e, operator_ids=[""]), "operator_ids[0]"),
    ],
)
def test_bad_listing_requests_name_the_field(
    finished: Finished, call: Callable[[ResultClient, str], Any], bad: str
) -> None:
    error = refused(lambda: call(finished.results, finished.execution_id))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad in bad_fields(error)


def test_unknown_results_are_not_found(finished: Finished) -> None:
    for call in (
        lambda: finished.results.get(finished.execution_id, "talker-2"),
        lambda: finished.results.page("no-such-execution", "numbers"),
        lambda: finished.results.snapshots(finished.execution_id, "nope"),
    ):
        assert refused(call).code() == grpc.StatusCode.NOT_FOUND


def _every_read(results: ResultClient, execution_id: str) -> list[Callable[[], Any]]:
    return [
        lambda: results.list_results(execution_id),
        lambda: results.get(execution_id, "numbers"),
        lambda: results.page(execution_id, "numbers"),
        lambda: results.stream(execution_id, "numbers"),
        lambda: results.snapshots(execution_id, "numbers"),
        lambda: results.statistics(execution_id),
        lambda: results.console(execution_id),
    ]


def test_another_user_finds_nothing(stack: Stack, finished: Finished) -> None:
    mallory = results_like(stack, unit_as(stack, "mallory"))
    for call in _every_read(mallory, finished.execution_id):
        error = refused(call)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert finished.warehouse_id not in (error.details() or "")


def test_archived_warehouses_stay_readable_and_deleted_ones_are_gone(stack: Stack) -> None:
    done = _run(
        stack,
        "archiver",
        [{"operator_id": "numbers", "range_source": {"end": 10}, "materialize": True}],
    )
    owner = user(stack, done.execution.owner_user_id)
    owner.call(
        owner.warehouses.ArchiveWarehouse,
        warehouse_service_pb2.ArchiveWarehouseRequest(warehouse_id=done.warehouse_id),
    )
    for call in _every_read(done.results, done.execution_id):
        call()
    assert _ids(done.results.rows(done.execution_id, "numbers")) == list(range(10))

    owner.call(
        owner.warehouses.DeleteWarehouse,
        warehouse_service_pb2.DeleteWarehouseRequest(warehouse_id=done.warehouse_id, purge=True),
    )
    for call in _every_read(done.results, done.execution_id):
        assert refused(call).code() == grpc.StatusCode.NOT_FOUND


def test_reads_run_alongside_each_other(finished: Finished) -> None:
    failures: list[BaseException] = []

    def read() -> None:
        try:
            assert (
                arrow_table(finished.results.stream(finished.execution_id, "numbers")).num_rows
                == ROWS
            )
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert pa.types.is_int64(
        arrow_table(finished.results.stream(finished.execution_id, "numbers", limit=1))
        .schema.field("id")
        .type
    )
