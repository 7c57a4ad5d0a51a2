"""Blocking calls (the catalog's, storage's) made side by side on threads of their own."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")


def in_parallel(calls: Sequence[Callable[[], T]]) -> list[T]:
    """The calls' results in order, once every call has ended; the first call's error that
    failed is raised (after the others ended too, so nothing goes on behind the caller's
    back). Each call runs in a copy of the caller's context (its trace span, for one)."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="parallel") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        wait(futures)
    return [future.result() for future in futures]
