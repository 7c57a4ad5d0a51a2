"""The retry helper: what it retries, what it does not, and where it stops."""

from __future__ import annotations

import time

import pytest

from service_runtime.retry import (
    RetryPolicy,
    retry_async,
    retry_call,
    transient_connection_error,
    transient_http_status,
)

QUICK = RetryPolicy(window_seconds=5.0, first_wait_seconds=0.01, longest_wait_seconds=0.05)


class Flaky:
    """Fails with the given errors in turn, then answers "done"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_transient_failures_are_retried_until_the_call_succeeds() -> None:
    call = Flaky(ConnectionRefusedError(), TimeoutError(), ConnectionResetError())
    assert retry_call(call, policy=QUICK, transient=transient_connection_error, what="t") == "done"
    assert call.calls == 4


def test_other_failures_are_raised_at_once() -> None:
    call = Flaky(ValueError("bad input"))
    with pytest.raises(ValueError, match="bad input"):
        retry_call(call, policy=QUICK, transient=transient_connection_error, what="t")
    assert call.calls == 1


def test_the_window_bounds_the_retries_and_the_last_failure_is_raised() -> None:
    policy = RetryPolicy(window_seconds=0.5, first_wait_seconds=0.05, longest_wait_seconds=0.1)
    call = Flaky(*[ConnectionRefusedError(f"attempt {n}") for n in range(1000)])
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError) as raised:
        retry_call(call, policy=policy, transient=transient_connection_error, what="t")
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 2.0  # its last attempt at the window's end, never long after
    assert 3 <= call.calls < 20
    assert str(raised.value) == f"attempt {call.calls - 1}"


def test_a_number_of_attempts_bounds_the_retries_too() -> None:
    policy = RetryPolicy(window_seconds=60, first_wait_seconds=0.001, max_attempts=3)
    call = Flaky(*[ConnectionRefusedError() for _ in range(10)])
    with pytest.raises(ConnectionRefusedError):
        retry_call(call, policy=policy, transient=transient_connection_error, what="t")
    assert call.calls == 3


def test_a_zero_window_tries_once() -> None:
    call = Flaky(ConnectionRefusedError())
    with pytest.raises(ConnectionRefusedError):
        retry_call(
            call,
            policy=RetryPolicy(window_seconds=0),
            transient=transient_connection_error,
            what="t",
        )
    assert call.calls == 1


def test_waits_grow_exponentially_with_bounded_jitter() -> None:
    policy = RetryPolicy(first_wait_seconds=1.0, longest_wait_seconds=8.0)
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)):
        waits = {policy.wait(attempt) for _ in range(50)}
        assert all(base <= wait <= base * 1.25 for wait in waits)
        assert len(waits) > 1  # jittered


def test_an_unbounded_window_waits_its_longest_however_many_attempts() -> None:
    policy = RetryPolicy(window_seconds=float("inf"), longest_wait_seconds=2.0)
    assert all(2.0 <= policy.wait(attempt) <= 2.5 for attempt in (1025, 10**6))


async def test_coroutines_are_retried_alike() -> None:
    call = Flaky(ConnectionRefusedError())

    async def attempt() -> str:
        return call()

    assert (
        await retry_async(attempt, policy=QUICK, transient=transient_connection_error, what="t")
        == "done"
    )
    assert call.calls == 2


def test_transient_signs() -> None:
    assert all(transient_http_status(s) for s in (408, 429, 500, 502, 503, 504))
    assert not any(transient_http_status(s) for s in (200, 400, 401, 403, 404, 409, 501))
    assert transient_connection_error(ConnectionRefusedError())
    assert not transient_connection_error(PermissionError())


def test_the_window_counts_from_the_first_attempt() -> None:
    policy = RetryPolicy(window_seconds=0.2, first_wait_seconds=0.01)

    def slow_refusal() -> str:
        time.sleep(0.3)
        raise ConnectionRefusedError("slow")

    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError, match="slow"):
        retry_call(slow_refusal, policy=policy, transient=transient_connection_error, what="t")
    assert time.monotonic() - started < 0.5  # one attempt: it alone outlasted the window


async def test_coroutines_stop_at_the_attempts_and_at_a_lasting_failure() -> None:
    policy = RetryPolicy(window_seconds=60, first_wait_seconds=0.001, max_attempts=4)
    refused = Flaky(*[ConnectionRefusedError(f"attempt {n}") for n in range(10)])
    bad_after_refusal = Flaky(ConnectionRefusedError(), ValueError("bad input"))
    for call, failure, calls in (
        (refused, "attempt 3", 4),
        (bad_after_refusal, "bad input", 2),
    ):

        async def attempt(call: Flaky = call) -> str:
            return call()

        with pytest.raises(Exception, match=failure):
            await retry_async(
                attempt, policy=policy, transient=transient_connection_error, what="t"
            )
        assert call.calls == calls
