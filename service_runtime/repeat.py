"""Repeating a call to another service of the mesh that answered UNAVAILABLE, for calls that are
safe to make twice (reads, and writes the caller made idempotent).

A service that restarts answers UNAVAILABLE at first even once it serves again: the channel
stays in its failed state until its next connection attempt (the mesh's channels try again at
least every second, see propagation.MESH_CHANNEL_OPTIONS). A few short waits cover that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from service_runtime.propagation import remaining_time
from service_runtime.retry import RetryPolicy, retry_async

T = TypeVar("T")

#: At most four attempts, 0.2, 0.4 and 0.8 s apart: longer, together, than a channel waits
#: before it connects again to a service that restarted.
REPEAT_POLICY = RetryPolicy(
    window_seconds=60.0, first_wait_seconds=0.2, longest_wait_seconds=0.8, max_attempts=4
)


def unavailable_with_time_left(error: BaseException) -> bool:
    """UNAVAILABLE from gRPC, with time for another attempt left before the served call's
    deadline."""
    if not isinstance(error, grpc.aio.AioRpcError) or error.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    left = remaining_time()
    return left is None or left > REPEAT_POLICY.longest_wait_seconds


async def repeat_while_unavailable(call: Callable[[], Awaitable[T]], what: str) -> T:
    """await call(), repeated as REPEAT_POLICY says while it fails UNAVAILABLE; raises its
    last failure as it was."""
    return await retry_async(
        call, policy=REPEAT_POLICY, transient=unavailable_with_time_left, what=what
    )
