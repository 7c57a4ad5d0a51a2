"""Cold start of a computing unit against the warm path, through the gateway.

Cold: a user with no unit submits; the registry makes the user's default unit and launches
it (a process, a JVM, a SparkSession, registration), and the submission waits for it; timed
from the submit call until the execution is RUNNING. Warm: the same user submits again to
the unit now running; timed from the submit call until RUNNING, and until SUCCEEDED. Each cold
run is a new user (a new unit). Printed as medians and ratios; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

import grpc

from benchmarks.shared import ExecutionFailed
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from embedded_stack.warehouse_request import create_warehouse_request
from service_runtime.auth import bearer
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_service_pb2_grpc,
    workflow_pb2,
)

es = execution_service_pb2
SMALL = workflow_pb2.Workflow(
    workflow_id="unit-start",
    operators=[
        workflow_pb2.Operator(
            operator_id="n", range_source=workflow_pb2.RangeSource(end=1000), materialize=True
        )
    ],
)
RUNNING_OR_LATER = {
    execution_pb2.EXECUTION_STATE_RUNNING,
    execution_pb2.EXECUTION_STATE_SUCCEEDED,
    execution_pb2.EXECUTION_STATE_FAILED,
    execution_pb2.EXECUTION_STATE_CANCELLED,
}


class Submitter:
    """One user with a warehouse, submitting through the gateway."""

    def __init__(self, stack: Stack, channel: grpc.Channel) -> None:
        user_id = f"bench-{uuid.uuid4().hex[:6]}"
        self.metadata = (bearer(stack.token(user_id)),)
        request = create_warehouse_request(stack.provision_bucket("bench"), name="bench")
        self.warehouse_id = (
            warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
            .CreateWarehouse(request, metadata=self.metadata, timeout=120)
            .warehouse.warehouse_id
        )
        self.executions = execution_service_pb2_grpc.ExecutionServiceStub(channel)

    def run(self) -> tuple[float, float]:
        """Seconds from the submit call until RUNNING, and until SUCCEEDED."""
        started = time.perf_counter()
        execution = self.executions.SubmitExecution(
            es.SubmitExecutionRequest(warehouse_id=self.warehouse_id, workflow=SMALL),
            metadata=self.metadata,
            timeout=600,
        ).execution
        running = None
        watch = es.WatchExecutionRequest(execution_id=execution.execution_id)
        for event in self.executions.WatchExecution(watch, metadata=self.metadata, timeout=600):
            if running is None and event.execution.state in RUNNING_OR_LATER:
                running = time.perf_counter() - started
            execution = event.execution
        if execution.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
            raise ExecutionFailed(f"the execution did not succeed: {execution.error}")
        done = time.perf_counter() - started
        return running if running is not None else done, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--warm-runs", type=int, default=10)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as state,
        Stack(StackSettings(state_dir=state), ephemeral_ports=True) as stack,
    ):
        channel = stack.channel("gateway", presenting=None)
        cold, warm_running, warm_done = [], [], []
        submitter = None
        for run in range(args.cold_runs):
            submitter = Submitter(stack, channel)
            cold.append(submitter.run()[0])
            print(f"  cold run {run + 1}: RUNNING after {cold[-1]:.2f} s", flush=True)
        assert submitter is not None
        for _ in range(args.warm_runs):
            running, done = submitter.run()
            warm_running.append(running)
            warm_done.append(done)
        cold_median = statistics.median(cold)
        running_median = statistics.median(warm_running)
        done_median = statistics.median(warm_done)
        print(f"cold start, submit -> RUNNING (median of {len(cold)}): {cold_median:.2f} s")
        print(f"warm, submit -> RUNNING (median of {len(warm_running)}): {running_median:.3f} s")
        print(f"warm, submit -> SUCCEEDED (median of {len(warm_done)}): {done_median:.3f} s")
        print(f"cold RUNNING / warm RUNNING: {cold_median / running_median:.1f}")
        print(f"cold RUNNING / warm SUCCEEDED: {cold_median / done_median:.1f}")


if __name__ == "__main__":
    main()
