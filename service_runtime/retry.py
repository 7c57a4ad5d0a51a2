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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
)
from tenacity.stop import stop_base

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
        base = min(self.longest_wait_seconds, self.first_wait_seconds * 2.0 ** (attempt - 1))
        return base + random.uniform(0, base / 4)  # noqa: S311 - jitter, not secrecy

    def _wait(self, state: RetryCallState) -> float:
        # Never sleep past the end of the window: the last attempt comes right at its end.
        left = self.window_seconds - (state.seconds_since_start or 0.0)
        return max(0.0, min(self.wait(state.attempt_number), left))

    def _stop(self) -> stop_base:
        by_time = stop_after_delay(self.window_seconds)
        if self.max_attempts is None:
            return by_time
        return stop_any(by_time, stop_after_attempt(self.max_attempts))


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
    policy: RetryPolicy, transient: Callable[[BaseException], bool], what: str
) -> dict[str, Any]:
    """tenacity's settings for policy, the same for calls and coroutines."""
    return {
        "retry": retry_if_exception(transient),
        "stop": policy._stop(),
        "wait": policy._wait,
        "before_sleep": _logger(what),
        "reraise": True,
    }


def retry_call(
    call: Callable[[], T],
    *,
    policy: RetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str,
) -> T:
    """call(), retried while it fails transiently; raises its last failure."""
    return Retrying(**_tenacity(policy, transient, what))(call)


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str,
) -> T:
    """await call(), retried while it fails transiently; raises its last failure."""
    retrying = AsyncRetrying(**_tenacity(policy, transient, what))

    async def attempt() -> T:  # a coroutine function, as tenacity tells them from plain ones
        return await call()

    return await retrying(attempt)
