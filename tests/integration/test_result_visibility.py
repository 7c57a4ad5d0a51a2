"""Visibility follows the ledger: a running execution shows what it has committed, a failed
or cancelled one shows no row through any read, whatever is left in storage, while its
console messages and statistics stay readable."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pyarrow as pa
import pytest

from embedded_stack.stack import Stack
from lake_tables.naming import result_table
from service_runtime.execution_states import state_name
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import UnitClient, new_user, udf, workflow
from tests.integration.mesh import reason_of, refused
from tests.integration.results import (
    ResultClient,
    arrow_table,
    first_commit,
    results_as,
    results_like,
)
from texera.lake.v1 import execution_pb2, result_pb2

pytestmark = pytest.mark.integration
#: TEXERA_LAKE_RESULT_VISIBILITY_RECHECK_SECONDS of the tests' stack (the default).
VISIBILITY_RECHECK_SECONDS = 1.0

#: Rows of output 'first' of the execution that is cancelled: enough for a stream of many
#: messages that flow control holds back while the client waits.
ROWS = 1_000_000
STREAM_BATCH_ROWS = 500
#: A channel whose flow-control window keeps its first size (gRPC grows it with the bandwidth
#: it measures otherwise, far enough on loopback to take a whole result ahead of the reader).
FIXED_WINDOW = (("grpc.http2.bdp_probe", 0),)


def _two_outputs(second_code: str, rows: int) -> Any:
    """'first' is committed, then 'second' runs second_code over it."""
    return workflow(
        [
            {
                "operator_id": "first",
                "range_source": {"end": rows, "partitions": 1},
                "materialize": True,
            },
            {
                "operator_id": "second",
                "input_operator_ids": ["first"],
                "python_udf": udf(second_code, [("id", "bigint")]),
                "materialize": True,
            },
        ]
    )


RAISES = (
    "def process(batches):\n"
    "    print('about to fail')\n"
    "    raise ValueError('the second output cannot be computed')\n"
    "    yield from batches\n"
)
WAITS = "import time\ndef process(batches):\n    time.sleep(120)\n    yield from batches\n"


def _every_result_read(
    results: ResultClient, execution_id: str, snapshot: result_pb2.Snapshot, page_token: str
) -> dict[str, Callable[[], Any]]:
    """Each way to read the rows of output 'first' (and what it was at snapshot); with a page
    token, also the page after the one it came with."""
    by_id = result_pb2.SnapshotSelector(snapshot_id=snapshot.snapshot_id)
    by_time = result_pb2.SnapshotSelector(as_of_time=snapshot.commit_time)
    reads = {
        "GetResult": lambda: results.get(execution_id, "first"),
        "GetResult at a snapshot": lambda: results.get(execution_id, "first", snapshot=by_id),
        "ReadResultPage": lambda: results.page(execution_id, "first"),
        "ReadResultPage at a time": lambda: results.page(execution_id, "first", snapshot=by_time),
        "StreamResult": lambda: results.stream(execution_id, "first"),
        "StreamResult at a snapshot": lambda: results.stream(execution_id, "first", snapshot=by_id),
        "ListSnapshots": lambda: results.snapshots(execution_id, "first"),
    }
    if page_token:
        reads["ReadResultPage, next page"] = lambda: results.page(
            execution_id, "first", page_token=page_token
        )
    return reads


def _shows_no_row(
    results: ResultClient,
    execution_id: str,
    snapshot: result_pb2.Snapshot,
    page_token: str,
    state: str,
) -> None:
    assert list(results.list_results(execution_id).results) == []
    for name, read in _every_result_read(results, execution_id, snapshot, page_token).items():
        error = refused(read)
        assert error.code() == grpc.StatusCode.NOT_FOUND, name
        assert "result first of execution" in (error.details() or ""), name
        assert reason_of(error) == ("RESULT_NOT_FOUND", {"execution_state": state}), name


def _telemetry_stays(results: ResultClient, execution_id: str, expected_message: str) -> None:
    messages = [m.message for m in results.console(execution_id).messages]
    assert any(expected_message in message for message in messages), messages
    statistics = results.statistics(execution_id).statistics
    assert {s.operator_id for s in statistics} >= {"first", "second"}


def _committed_while_running(
    unit: UnitClient, results: ResultClient, execution_id: str
) -> tuple[result_pb2.Snapshot, str]:
    """Output 'first' is readable while the execution runs; its snapshot and a page token."""
    snapshot = first_commit(results, execution_id, "first")
    assert state_name(unit.get(execution_id)) == "RUNNING"
    [listed] = [r for r in results.list_results(execution_id).results if r.row_count]
    assert (listed.operator_id, listed.row_count) == ("first", ROWS)
    page = results.page(execution_id, "first", page_size=10)
    assert len(page.rows) == 10
    assert arrow_table(results.stream(execution_id, "first")).num_rows == ROWS
    return snapshot, page.next_page_token


def test_failed_and_cancelled_executions_show_no_row_anywhere(stack: Stack) -> None:
    unit, warehouse_id, _ = new_user(stack, "withdrawn")
    results = results_like(stack, unit)
    cancelled = unit.submit(warehouse_id, _two_outputs(WAITS, ROWS)).execution_id
    failing = unit.submit(warehouse_id, _two_outputs(RAISES, 1_000)).execution_id

    # Cancelled after its first output was committed and read, with a page token in hand and
    # a stream begun.
    snapshot, page_token = _committed_while_running(unit, results, cancelled)
    held_back = results_as(stack, unit.user_id, channel_options=FIXED_WINDOW)
    stream = held_back.open_stream(cancelled, "first", max_batch_rows=STREAM_BATCH_ROWS)
    streamed = [next(stream), next(stream)]  # the schema and a first batch
    unit.cancel(cancelled, "enough")
    ended = unit.finish(cancelled, timeout=120)
    assert state_name(ended) == "CANCELLED"
    time.sleep(VISIBILITY_RECHECK_SECONDS + 0.5)
    with pytest.raises(grpc.RpcError) as stopped:
        streamed += list(stream)
    assert stopped.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(stopped.value) == ("RESULT_NOT_FOUND", {"execution_state": "CANCELLED"})
    assert sum(message.row_count for message in streamed) < ROWS
    _shows_no_row(results, cancelled, snapshot, page_token, "CANCELLED")
    _telemetry_stays(results, cancelled, "execution cancelled")

    # Failed in its second output, after the first was committed.
    ended = unit.finish(failing, timeout=180)
    assert state_name(ended) == "FAILED"
    assert (ended.error.reason, ended.error.operator_id) == ("OPERATOR_FAILED", "second")
    # Whatever is left in storage (here: the output's table put back, with rows), the state
    # decides: still nothing.
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    put_back = catalog.create_table_if_not_exists(
        ("results", result_table(failing, "first")), schema=pa.schema([("id", pa.int64())])
    )
    put_back.append(pa.table({"id": pa.array(range(5), pa.int64())}))
    left = put_back.current_snapshot()
    assert left is not None
    left_snapshot = result_pb2.Snapshot(snapshot_id=left.snapshot_id)
    left_snapshot.commit_time.FromMilliseconds(left.timestamp_ms)
    _shows_no_row(results, failing, left_snapshot, "", "FAILED")
    _telemetry_stays(results, failing, "the second output cannot be computed")


SLEEPS = "import time\ndef process(batches):\n    time.sleep(4)\n    yield from batches\n"


def test_an_execution_whose_last_commit_fails_never_says_it_succeeded(stack: Stack) -> None:
    """The last commit's manifests and the last telemetry's files are written side by side;
    the telemetry, whose console says the execution succeeded, is committed only once the
    results are. Here the result table is dropped from under the execution before its commit."""
    unit, warehouse_id, _ = new_user(stack, "overtaken")
    results = results_like(stack, unit)
    plan = workflow(
        [
            {"operator_id": "numbers", "range_source": {"end": 10}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["numbers"],
                "python_udf": udf(SLEEPS, [("id", "bigint")]),
                "materialize": True,
            },
        ]
    )
    execution_id = unit.submit(warehouse_id, plan).execution_id
    running = unit.wait_for_state(execution_id, execution_pb2.EXECUTION_STATE_RUNNING)
    assert state_name(running) == "RUNNING"  # its tables exist from then on
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    catalog.drop_table(("results", result_table(execution_id, "slow")))

    ended = unit.finish(execution_id, timeout=120)
    assert state_name(ended) == "FAILED"
    messages = [m.message for m in results.console(execution_id).messages]
    assert not any("succeeded" in message for message in messages), messages
    levels = {m.level for m in results.console(execution_id).messages}
    assert result_pb2.CONSOLE_LEVEL_ERROR in levels, messages
    assert {s.operator_id for s in results.statistics(execution_id).statistics} >= {"slow"}
