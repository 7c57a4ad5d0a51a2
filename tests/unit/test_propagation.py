"""Work a served call starts and that outlives it keeps the call's caller, not its deadline."""

from __future__ import annotations

import time

from service_runtime import context
from service_runtime.propagation import beyond_the_call, remaining_time


async def test_work_beyond_the_call_has_no_deadline_but_keeps_the_request_id() -> None:
    context.request_id_var.set("request-1")
    context.deadline_var.set(time.monotonic() - 1.0)  # the submitting call's time is up
    assert remaining_time(30.0) == 0.0

    async def later() -> tuple[float | None, str | None]:
        return remaining_time(30.0), context.request_id_var.get()

    assert await beyond_the_call(later()) == (30.0, "request-1")
    assert remaining_time(30.0) == 0.0  # the call's own context keeps its deadline
