"""A burst of calls larger than grpc's own backlog of calls waiting for the service (1,000 by
default, past which grpc ends calls CANCELLED by itself) still reaches the service: each call
is answered by it, here by the gateway's rate limit; on a real grpc.aio server in this
process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gateway.rate_limit import RateLimiter
from gateway.service import WAREHOUSES, Admission, binding
from service_runtime.auth import bearer, mint_token
from service_runtime.server import RunningServer
from tests.in_process import serving

BURST = 2_000


async def _answer(request: bytes, call: Any) -> bytes:
    return b""


@pytest.fixture
async def server(jwt_secret: str) -> AsyncIterator[RunningServer]:
    async with serving(
        [binding(WAREHOUSES, lambda method: _answer, Admission(RateLimiter(1, 3)))], jwt_secret
    ) as running:
        yield running


async def test_every_call_of_a_burst_reaches_the_service(
    server: RunningServer, jwt_secret: str
) -> None:
    metadata = (bearer(mint_token(jwt_secret, "alice")),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{WAREHOUSES.full_name}/ListWarehouses"
        )

        async def one() -> grpc.StatusCode:
            try:
                await call(b"", metadata=metadata, timeout=60)
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        codes = await asyncio.gather(*(one() for _ in range(BURST)))
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
