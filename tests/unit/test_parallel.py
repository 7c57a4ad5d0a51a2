"""Blocking calls side by side."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from cu_service.parallel import in_parallel

_marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="")


def test_results_in_order_of_the_calls_made_at_once() -> None:
    started = threading.Barrier(3, timeout=5)  # passes only if all three run together

    def call(value: int) -> int:
        started.wait()
        return value

    assert in_parallel([lambda: call(1), lambda: call(2), lambda: call(3)]) == [1, 2, 3]


def test_an_error_is_raised_once_every_call_ended() -> None:
    ended: list[str] = []

    def slow() -> None:
        time.sleep(0.2)
        ended.append("slow")

    def failing() -> None:
        raise ValueError("no table")

    with pytest.raises(ValueError, match="no table"):
        in_parallel([failing, slow])
    assert ended == ["slow"]


def test_calls_see_the_callers_context() -> None:
    _marker.set("span of the run")
    assert in_parallel([_marker.get, _marker.get]) == ["span of the run"] * 2
