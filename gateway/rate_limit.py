"""A per-user rate limit: a token bucket for each user.

Each user's bucket holds up to `burst` calls and refills at `rate` calls a
second. A call that finds it empty is refused with how long until a call will
be admitted, for the caller's RetryInfo. Buckets that are full are forgotten
once there are many users, so memory stays bounded.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_users: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._max_users = max_users
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def admit(self, user_id: str) -> float:
        """0 if the user's call may go ahead (and counts it), else seconds until one may."""
        now = self._clock()
        bucket = self._buckets.pop(user_id, None) or _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        self._buckets[user_id] = bucket  # most recently used last
        self._forget_idle()
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate

    def _forget_idle(self) -> None:
        """Drops the least recently used buckets beyond max_users (they come back full)."""
        while len(self._buckets) > self._max_users:
            self._buckets.popitem(last=False)
