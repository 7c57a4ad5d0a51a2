"""Ending the Python worker daemon of a unit that has nothing to run.

The daemon (cu_service.worker_daemon) holds the modules the unit preloads for its tasks, some
110 MiB. Once the unit has had no execution running or queued, no submission, no warm-up and
no Spark job for TEXERA_LAKE_CU_PYTHON_IDLE_SECONDS, Spark's factory of Python workers is
stopped (pyspark_private.stop_python_daemons): its idle workers end, then the daemon. The next
Python task starts a daemon again and waits for it, some 0.6 s. A pooled unit keeps its
daemon until it is handed over: this runs from then on.

Checked on the event loop, which is where submissions arrive: between the check and the stop
no execution can start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("cu_service.idle_python")


class IdlePython:
    """Calls release once the unit has been quiet for idle_seconds: activity() (running, queued
    and ever submitted executions) said (0, 0, n) with the same n all along, and busy() (a
    warm-up or a Spark job under way) is false when it is due. Once more after each new
    activity."""

    def __init__(
        self,
        activity: Callable[[], tuple[int, int, int]],
        busy: Callable[[], bool],
        release: Callable[[], int],
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._activity = activity
        self._busy = busy
        self._release = release
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._seen: tuple[int, int, int] | None = None
        self._quiet_since = clock()
        self._released = False

    def check(self) -> None:
        activity, now = self._activity(), self._clock()
        if activity != self._seen or activity[:2] != (0, 0):
            self._seen, self._quiet_since, self._released = activity, now, False
            return
        if self._released or now - self._quiet_since < self._idle_seconds:
            return
        if self._busy():
            self._quiet_since = now
            return
        self._released = True  # one try a quiet spell: a failing release is logged once
        stopped = self._release()
        log.info("idle: Python worker daemon ended", extra={"factories": stopped})
