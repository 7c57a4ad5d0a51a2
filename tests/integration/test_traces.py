"""One execution is one trace across the mesh, as the services write it to their logs."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

from benchmarks.traces import spans_of
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from service_runtime.tracing import trace_metadata
from tests.integration.executions import UnitClient, filtered_numbers, new_user
from tests.integration.mesh import bearer
from tests.integration.results import ResultClient
from texera.lake.v1 import execution_service_pb2_grpc, result_service_pb2_grpc

pytestmark = pytest.mark.integration


def test_an_execution_is_one_trace_from_the_gateway_to_the_first_page(stack: Stack) -> None:
    direct, warehouse_id, _ = new_user(stack, "traced")
    channel = stack.channel("gateway", presenting=None)
    with TracerProvider().get_tracer("test").start_as_current_span("client") as root:
        # The user's calls through the gateway, in the client's trace.
        metadata = (*bearer(stack.token(direct.user_id)), *trace_metadata())
        unit = UnitClient(
            execution_service_pb2_grpc.ExecutionServiceStub(channel), metadata, direct.unit_id
        )
        results = ResultClient(result_service_pb2_grpc.ResultServiceStub(channel), metadata)
        execution = unit.submit(warehouse_id, filtered_numbers(100, 2, "id < 7"))
        assert state_name(unit.watch(execution.execution_id)[-1]) == "SUCCEEDED"
        assert len(results.rows(execution.execution_id, "kept")) == 7
    trace_id = f"{root.get_span_context().trace_id:032x}"
    logs = [*stack.log_dir.glob("*.log"), *(stack.unit_root / "logs").glob("*.log")]

    def spans() -> list[dict[str, object]]:
        return spans_of(trace_id, logs)

    deadline = time.monotonic() + 10
    while not any(s["name"] == "execution" for s in spans()) and time.monotonic() < deadline:
        time.sleep(0.2)
    found = spans()
    by_id = {s["span_id"]: s for s in found}
    names = {(s["service"], s["name"]) for s in found}
    api, internal = "/texera.lake.v1.", "/texera.lake.internal.v1.ExecutionLedgerService/"
    for expected in [
        ("gateway", f"{api}ExecutionService/SubmitExecution"),
        ("cu-service", f"{api}ExecutionService/SubmitExecution"),
        ("warehouse-service", f"{internal}BindExecution"),
        ("warehouse-service", f"{internal}UpdateExecutionState"),
        ("cu-service", f"{api}ExecutionService/WatchExecution"),
        ("result-service", f"{api}ResultService/ReadResultPage"),
        ("cu-service", "compile"),
        ("cu-service", "create tables"),
        ("cu-service", "create telemetry tables"),
        ("cu-service", "spark job"),
        ("cu-service", "prepare last commits"),
        ("cu-service", "prepare commit"),
        ("cu-service", "commit"),
        ("cu-service", "write telemetry"),
    ]:
        assert expected in names
    [run] = [s for s in found if s["name"] == "execution"]
    assert run["attributes"] == {"execution.id": execution.execution_id}
    # The phases nest: the output's one commit is the execution's last, made once its
    # manifests were written side by side with the last telemetry's files.
    [write] = [s for s in found if s["name"] == "write output"]
    [prepared] = [s for s in found if s["name"] == "prepare commit"]
    [commit] = [s for s in found if s["name"] == "commit"]
    assert by_id[str(write["parent_id"])] is run
    assert by_id[str(prepared["parent_id"])]["name"] == "prepare last commits"
    assert by_id[str(commit["parent_id"])] is run
    prepared_end = int(str(prepared["start_ns"])) + float(str(prepared["duration_ms"])) * 1e6
    assert int(str(commit["start_ns"])) >= prepared_end - 1000  # durations are rounded
    # The unit's call continues the gateway's, which continues the client's.
    [unit_submit, gateway_submit] = sorted(
        (s for s in found if str(s["name"]).endswith("/SubmitExecution")),
        key=lambda s: s["service"] == "gateway",
    )
    assert unit_submit["parent_id"] == gateway_submit["span_id"]
    assert gateway_submit["parent_id"] == f"{root.get_span_context().span_id:016x}"
    # Spans carry names and ids, not the caller's token.
    tokens = [value.split()[-1] for key, value in unit.metadata if key == "authorization"]
    assert tokens
    assert not any(token in json.dumps(s) for s in found for token in tokens)
