"""Retrying what failed for a passing reason: exponential backoff with jitter, for a bounded
time and number of attempts.

The one retry helper of the project (built on tenacity). Callers say which
failures are transient; everything else is raised at once, and once the
time or the attempts are spent the last failure is raised as it was. The
generic signs of a passing failure (HTTP 408, 429, 500, 502, 503 or 504, a
refused or reset connection, a timeout) are here; each caller adds those of its own
libraries.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception

log = logging.getLogger("service_runtime.retry")
T = TypeVar("T")

#: HTTP statuses that say "try again later".
TRANSIENT_HTTP_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry: the first wait, doubled each time up to the longest
    (plus up to a quarter of it as jitter), until the window or the attempts are spent."""

    window_seconds: float = 60.0
    first_wait_seconds: float = 0.5
    longest_wait_seconds: float = 8.0
    max_attempts: int | None = None

    def wait(self, attempt: int) -> float:
        """The wait after the given failed attempt (1 for the first)."""
        # The doubling stops long before a float would overflow (an unbounded window's
        # thousandth attempt and beyond).
        doubled = self.first_wait_seconds * 2.0 ** min(attempt - 1, 64)
        base = min(self.longest_wait_seconds, doubled)
        return base + random.uniform(0, base / 4)  # noqa: S311 - jitter, not secrecy


def transient_http_status(status: int) -> bool:
    return status in TRANSIENT_HTTP_STATUSES


def transient_connection_error(error: BaseException) -> bool:
    """A refused or reset connection, or a timeout (Python's own, or asyncio's)."""
    return isinstance(error, ConnectionError | TimeoutError)


def _logger(what: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        log.warning(
            "transient failure; retrying",
            extra={
                "what": what,
                "attempt": state.attempt_number,
                "failure": type(failure).__name__,
                "wait_seconds": round(state.upcoming_sleep, 2),
            },
        )

    return before_sleep


def _tenacity(
    policy: RetryPolicy, transient: Callable[[BaseException], bool], what: str, started: float
) -> dict[str, Any]:
    """tenacity's settings for policy, the same for calls and coroutines; the window counts
    from started (time.monotonic()), when the first attempt began."""

    def spent() -> float:
        return time.monotonic() - started

    def wait(state: RetryCallState) -> float:
        # Never sleep past the end of the window: the last attempt comes right at its end.
        return max(0.0, min(policy.wait(state.attempt_number), policy.window_seconds - spent()))

    def stop(state: RetryCallState) -> bool:
        attempts_spent = policy.max_attempts is not None and (
            state.attempt_number >= policy.max_attempts
        )
        return attempts_spent or spent() >= policy.window_seconds

    return {
        "retry": retry_if_exception(transient),
        "stop": stop,
        "wait": wait,
        "before_sleep": _logger(what),
        "reraise": True,
    }


class _FirstFailure:
    """The first attempt is made without tenacity, which costs tens of microseconds a call to
    set up; only a transient failure starts tenacity, whose first attempt raises that failure
    again, so that counts, waits and logs are as if tenacity had made it."""

    def __init__(self, error: Exception) -> None:
        self._error: Exception | None = error

    def replay(self) -> None:
        """Raises the first failure, the first time only."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def retry_call(
    call: Callable[[], T],
    *,
    policy: RetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str,
) -> T:
    """call(), retried while it fails transiently; raises its last failure."""
    started = time.monotonic()
    try:
        return call()
    except Exception as error:
        if not transient(error):
            raise
        first = _FirstFailure(error)

    def attempt() -> T:
        first.replay()
        return call()

    return Retrying(**_tenacity(policy, transient, what, started))(attempt)


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str,
) -> T:
    """await call(), retried while it fails transiently; raises its last failure."""
    started = time.monotonic()
    try:
        return await call()
    except Exception as error:
        if not transient(error):
            raise
        first = _FirstFailure(error)

    async def attempt() -> T:  # a coroutine function, as tenacity tells them from plain ones
        first.replay()
        return await call()

    return await AsyncRetrying(**_tenacity(policy, transient, what, started))(attempt)
