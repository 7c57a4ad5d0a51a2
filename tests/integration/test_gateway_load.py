"""The gateway under load its clients make: a burst of calls from one user, and streams they
cancel. Every refusal is RESOURCE_EXHAUSTED with RetryInfo, never a bare CANCELLED; a
cancelled stream is a call that ended CANCELLED, logged at INFO, with no ERROR anywhere."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from embedded_stack.stack import Stack
from service_runtime.errors import status_details
from service_runtime.execution_states import state_name
from service_runtime.tls.mesh_client import MeshClientTls, mesh_channel
from tests.integration.executions import new_user, workflow
from tests.integration.mesh import bearer, reason
from texera.lake.v1 import result_service_pb2, result_service_pb2_grpc

pytestmark = pytest.mark.integration

BURST = 1_500
RATE_PER_SECOND, RATE_BURST = 1, 3
LIST_WAREHOUSES = "/texera.lake.v1.WarehouseService/ListWarehouses"


@pytest.fixture(scope="module")
def limited_gateway(stack: Stack) -> Iterator[str]:
    """A second gateway, allowing each user one call a second, bursts of three."""
    yield stack.start_part(
        "limited-gateway",
        "gateway",
        {
            "TEXERA_LAKE_GATEWAY_RATE_PER_SECOND": str(RATE_PER_SECOND),
            "TEXERA_LAKE_GATEWAY_RATE_BURST": str(RATE_BURST),
        },
    )
    stack.stop_part("limited-gateway")


def _has_retry_info(error: grpc.aio.AioRpcError) -> bool:
    return any(
        detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for detail in status_details(error)
    )


async def _burst(target: str, tls: MeshClientTls | None, token: str) -> list[Any]:
    """BURST calls at once from one user: each one's answer, or its error."""
    async with mesh_channel(target, tls) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(LIST_WAREHOUSES)

        async def one() -> Any:
            try:
                return await call(b"", metadata=bearer(token), timeout=120)
            except grpc.aio.AioRpcError as error:
                return error

        return await asyncio.gather(*(one() for _ in range(BURST)))


def test_every_call_of_a_burst_is_answered_or_refused_with_retry_info(
    stack: Stack, limited_gateway: str
) -> None:
    started = time.monotonic()
    user = stack.token(f"burst-{uuid.uuid4().hex[:6]}")
    answers = asyncio.run(_burst(limited_gateway, stack.client_tls(None), user))
    elapsed = time.monotonic() - started
    errors = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
    codes = {error.code() for error in errors}
    assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED}, {c.name for c in codes}
    assert all(reason(error) == "RATE_LIMITED" and _has_retry_info(error) for error in errors)
    assert RATE_BURST <= BURST - len(errors) <= RATE_BURST + RATE_PER_SECOND * (elapsed + 1)


def _log_since(path: Path, offset: int) -> list[dict[str, Any]]:
    """The JSON lines a log gained after offset."""
    with path.open("rb") as log:
        log.seek(offset)
        lines = log.read().decode().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_a_stream_its_client_cancels_logs_no_error(stack: Stack) -> None:
    unit, warehouse_id, _ = new_user(stack, "canceller")
    flow = workflow(
        [
            {
                "operator_id": "n",
                "range_source": {"end": 300_000, "partitions": 4},
                "materialize": True,
            }
        ]
    )
    done = unit.finish(unit.submit(warehouse_id, flow).execution_id)
    assert state_name(done) == "SUCCEEDED", done.error
    logs = [stack.log_dir / f"{part}.log" for part in ("gateway", "result-service")]
    offsets = [log.stat().st_size for log in logs]
    # A client that lets little through before it reads: the stream cannot end before it cancels.
    small_window = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65_536))
    stub = result_service_pb2_grpc.ResultServiceStub(
        stack.channel("gateway", presenting=None, options=small_window)
    )
    request = result_service_pb2.StreamResultRequest(
        execution_id=done.execution_id, operator_id="n", max_batch_rows=1_000
    )
    request_ids = [f"cancelled-stream-{uuid.uuid4().hex[:8]}" for _ in range(5)]
    for request_id in request_ids:
        metadata = (*bearer(stack.token(unit.user_id)), ("x-request-id", request_id))
        stream = stub.StreamResult(request, metadata=metadata, timeout=120)
        next(stream)
        next(stream)
        time.sleep(0.5)  # the gateway fills the flow-control window, then waits to send more
        stream.cancel()
    time.sleep(3)  # for anything that would be logged once the streams are gone

    gateway, result_service = (_log_since(log, at) for log, at in zip(logs, offsets, strict=True))
    assert [e for e in gateway + result_service if e.get("level") in ("ERROR", "CRITICAL")] == []
    # (The result service may well have sent its whole stream to the gateway before that.)
    finished = {
        e["request_id"]: (e["level"], e["code"])
        for e in gateway
        if e.get("message") == "rpc finished" and e.get("request_id") in request_ids
    }
    assert finished == dict.fromkeys(request_ids, ("INFO", "CANCELLED"))
