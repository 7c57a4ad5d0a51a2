"""A per-user rate limit: a token bucket for each user.

Each user's bucket holds up to `burst` calls and refills at `rate` calls a
second. A call that finds it empty is refused with how long until a call will
be admitted, for the caller's RetryInfo. Buckets that are full are forgotten
once there are many users, so memory stays bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache


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
        self._clock = clock
        #: The least recently used buckets beyond max_users are dropped (they come back full).
        self._buckets: LRUCache[str, _Bucket] = LRUCache(maxsize=max_users)

    def admit(self, user_id: str) -> float:
        """0 if the user's call may go ahead (and counts it), else seconds until one may."""
        now = self._clock()
        bucket = self._buckets.get(user_id) or _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        self._buckets[user_id] = bucket
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate
