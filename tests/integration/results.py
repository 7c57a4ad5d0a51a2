"""Reading results back from the result service, as a client does."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import grpc
import pyarrow as pa
from google.protobuf import json_format

from embedded_stack.stack import Stack
from tests.integration.executions import UnitClient
from tests.integration.mesh import Metadata, bearer
from texera.lake.v1 import result_pb2, result_service_pb2, result_service_pb2_grpc

rs = result_service_pb2


@dataclass
class ResultClient:
    stub: result_service_pb2_grpc.ResultServiceStub
    metadata: Metadata

    def list_results(self, execution_id: str, **fields: Any) -> rs.ListResultsResponse:
        request = rs.ListResultsRequest(execution_id=execution_id, **fields)
        return self.stub.ListResults(request, metadata=self.metadata, timeout=60)

    def get(self, execution_id: str, operator_id: str, **fields: Any) -> result_pb2.Result:
        request = rs.GetResultRequest(execution_id=execution_id, operator_id=operator_id, **fields)
        return self.stub.GetResult(request, metadata=self.metadata, timeout=60).result

    def page(self, execution_id: str, operator_id: str, **fields: Any) -> rs.ReadResultPageResponse:
        request = rs.ReadResultPageRequest(
            execution_id=execution_id, operator_id=operator_id, **fields
        )
        return self.stub.ReadResultPage(request, metadata=self.metadata, timeout=120)

    def rows(self, execution_id: str, operator_id: str, **fields: Any) -> list[dict[str, Any]]:
        """One page's rows as plain JSON objects."""
        page = self.page(execution_id, operator_id, **fields)
        return [json_format.MessageToDict(row) for row in page.rows]

    def all_rows(
        self, execution_id: str, operator_id: str, **fields: Any
    ) -> tuple[list[dict[str, Any]], set[int]]:
        """Every row, following next_page_token; and the snapshot ids the pages read."""
        rows: list[dict[str, Any]] = []
        snapshots: set[int] = set()
        token = ""
        while True:
            page = self.page(execution_id, operator_id, page_token=token, **fields)
            rows += [json_format.MessageToDict(row) for row in page.rows]
            snapshots.add(page.snapshot_id)
            token = page.next_page_token
            if not token:
                return rows, snapshots

    def open_stream(self, execution_id: str, operator_id: str, **fields: Any) -> Any:
        """The stream's call: iterate it for messages, cancel() it to stop."""
        request = rs.StreamResultRequest(
            execution_id=execution_id, operator_id=operator_id, **fields
        )
        return self.stub.StreamResult(request, metadata=self.metadata, timeout=300)

    def stream(
        self, execution_id: str, operator_id: str, **fields: Any
    ) -> list[rs.StreamResultResponse]:
        return list(self.open_stream(execution_id, operator_id, **fields))

    def snapshots(
        self, execution_id: str, operator_id: str, **fields: Any
    ) -> list[result_pb2.Snapshot]:
        request = rs.ListSnapshotsRequest(
            execution_id=execution_id, operator_id=operator_id, **fields
        )
        return list(self.stub.ListSnapshots(request, metadata=self.metadata, timeout=60).snapshots)

    def statistics(self, execution_id: str, **fields: Any) -> rs.ListRuntimeStatisticsResponse:
        request = rs.ListRuntimeStatisticsRequest(execution_id=execution_id, **fields)
        return self.stub.ListRuntimeStatistics(request, metadata=self.metadata, timeout=60)

    def console(self, execution_id: str, **fields: Any) -> rs.ListConsoleMessagesResponse:
        request = rs.ListConsoleMessagesRequest(execution_id=execution_id, **fields)
        return self.stub.ListConsoleMessages(request, metadata=self.metadata, timeout=60)


def first_commit(results: ResultClient, execution_id: str, operator_id: str) -> result_pb2.Snapshot:
    """The output's first snapshot, once it is committed."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            listed = results.snapshots(execution_id, operator_id)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:  # not committed yet
                raise
        else:
            if listed:
                return listed[0]
        time.sleep(0.2)
    raise AssertionError("the output was never committed")


def arrow_table(messages: list[rs.StreamResultResponse]) -> pa.Table:
    """The table an Arrow IPC stream cut into messages carries."""
    return pa.ipc.open_stream(b"".join(m.arrow_ipc for m in messages)).read_all()


def results_as(
    stack: Stack,
    user_id: str,
    part: str = "result-service",
    channel_options: tuple[tuple[str, Any], ...] = (),
) -> ResultClient:
    """ResultService of part (the result service, or the gateway) as user_id."""
    # A user reaches the gateway; the result service is reached as the gateway.
    presenting = None if part == "gateway" else "gateway"
    channel = stack.channel(part, presenting=presenting, options=channel_options)
    return ResultClient(
        result_service_pb2_grpc.ResultServiceStub(channel), bearer(stack.token_for(part, user_id))
    )


def results_like(stack: Stack, unit: UnitClient) -> ResultClient:
    """A result client calling as the same user as unit."""
    return results_as(stack, unit.user_id)
