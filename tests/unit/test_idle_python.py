"""When an idle unit ends its Python worker daemon (cu_service.idle_python): only after the
whole idle time without activity, never while a warm-up or a Spark job runs, once per quiet
spell."""

from __future__ import annotations

import contextlib

from cu_service.idle_python import IdlePython


class Unit:
    """What IdlePython watches, as the test sets it, and the releases it made."""

    def __init__(self) -> None:
        self.now = 0.0
        self.activity = (0, 0, 0)
        self.busy = False
        self.releases = 0
        self.idle = IdlePython(
            lambda: self.activity, lambda: self.busy, self.release, 60.0, lambda: self.now
        )

    def release(self) -> int:
        self.releases += 1
        return 1

    def at(self, now: float) -> int:
        """Checks at that time; the releases so far."""
        self.now = now
        self.idle.check()
        return self.releases


def test_the_daemon_ends_once_the_unit_was_quiet_for_the_idle_time() -> None:
    unit = Unit()
    assert unit.at(1.0) == 0
    assert unit.at(60.5) == 0
    assert unit.at(61.0) == 1
    assert unit.at(200.0) == 1  # once: it stays ended until something runs


def test_running_or_queued_executions_keep_it() -> None:
    unit = Unit()
    unit.at(0.0)
    unit.activity = (1, 0, 1)
    assert unit.at(100.0) == 0
    unit.activity = (0, 1, 2)
    assert unit.at(200.0) == 0
    unit.activity = (0, 0, 2)
    assert unit.at(201.0) == 0  # quiet from here
    assert unit.at(260.0) == 0
    assert unit.at(261.0) == 1


def test_a_submission_in_between_starts_the_idle_time_again() -> None:
    unit = Unit()
    unit.at(0.0)
    unit.activity = (0, 0, 1)  # an execution came and went between two checks
    assert unit.at(59.0) == 0
    assert unit.at(100.0) == 0
    assert unit.at(119.0) == 1


def test_a_warm_up_or_a_spark_job_under_way_holds_it_off() -> None:
    unit = Unit()
    unit.at(0.0)
    unit.busy = True
    assert unit.at(61.0) == 0
    unit.busy = False
    assert unit.at(100.0) == 0  # the idle time counts from when it was last seen busy
    assert unit.at(121.0) == 1


def test_after_new_work_it_ends_again() -> None:
    unit = Unit()
    unit.at(0.0)
    assert unit.at(61.0) == 1
    unit.activity = (0, 0, 1)
    assert unit.at(62.0) == 1
    assert unit.at(122.0) == 2


def test_a_release_that_fails_is_not_tried_again_until_new_work() -> None:
    unit = Unit()
    calls = []

    def failing() -> int:
        calls.append(unit.now)
        raise RuntimeError("the JVM moved")

    unit.idle = IdlePython(lambda: unit.activity, lambda: False, failing, 60.0, lambda: unit.now)
    unit.at(0.0)
    for now in (61.0, 62.0, 100.0):
        with contextlib.suppress(RuntimeError):
            unit.at(now)
    assert calls == [61.0]
