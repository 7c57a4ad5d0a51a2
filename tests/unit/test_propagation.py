"""Work a served call starts and that outlives it keeps whom the call serves, not its deadline
or its token."""

from __future__ import annotations

import time

from service_runtime import context
from service_runtime.auth import AUTHORIZATION_KEY, ON_BEHALF_KEY, USER_ROLE, Identity, bearer
from service_runtime.propagation import beyond_the_call, context_metadata, remaining_time


async def test_work_beyond_the_call_has_no_deadline_but_keeps_the_request_id() -> None:
    context.request_id_var.set("request-1")
    context.deadline_var.set(time.monotonic() - 1.0)  # the submitting call's time is up
    assert remaining_time(30.0) == 0.0

    async def later() -> tuple[float | None, str | None]:
        return remaining_time(30.0), context.request_id_var.get()

    assert await beyond_the_call(later()) == (30.0, "request-1")
    assert remaining_time(30.0) == 0.0  # the call's own context keeps its deadline


async def test_work_beyond_the_call_carries_the_service_credential_alone() -> None:
    user = Identity("alice", USER_ROLE, "alice-token-minted-for-minutes", "unit:u1")
    context.identity_var.set(user)
    assert (ON_BEHALF_KEY, user.token) in context_metadata(credential="unit-credential")

    async def later() -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
        identity = context.identity_var.get()
        assert identity is not None
        return context_metadata(), context_metadata("unit-credential"), identity.user_id

    alone, with_credential, served = await beyond_the_call(later())
    assert served == "alice"  # log lines still name whom the work serves
    assert [key for key, _ in alone if key in (AUTHORIZATION_KEY, ON_BEHALF_KEY)] == []
    assert bearer("unit-credential") in with_credential
    assert all(value != user.token for _, value in with_credential)
    assert context.identity_var.get() == user  # the call's own context keeps the token
