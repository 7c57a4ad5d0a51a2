"""The registry's scheduler (warehouse_service.background.scheduler) running fake steps: jobs
repeat at their interval, at once after a full batch, through a database outage and through an
unexpected error; a one-shot runs once; stopping cancels every job."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from warehouse_service.background.scheduler import Scheduler
from warehouse_service.store.db import unavailable

SHORT = 0.01
#: Longer than any test runs: a job waiting this long takes no other round meanwhile.
NEVER = 3600.0


class Step:
    """A fake step: each round answers the next of its outcomes (how many it took, or None, or
    an exception it raises), the last one again once they run out."""

    def __init__(self, *outcomes: int | Exception | None) -> None:
        self._outcomes = outcomes
        self.answers: list[int | str | None] = []
        self._ran = asyncio.Event()

    @property
    def rounds(self) -> int:
        return len(self.answers)

    async def __call__(self) -> int | None:
        outcome = self._outcomes[min(self.rounds, len(self._outcomes) - 1)]
        self.answers.append(type(outcome).__name__ if isinstance(outcome, Exception) else outcome)
        self._ran.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def ran(self, rounds: int) -> None:
        """Returns once the step has run rounds times (failing the test after 5 s)."""
        async with asyncio.timeout(5):
            while self.rounds < rounds:
                self._ran.clear()
                await self._ran.wait()


@asynccontextmanager
async def running(scheduler: Scheduler) -> AsyncIterator[Scheduler]:
    scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()


async def test_a_job_runs_again_every_interval_and_only_then() -> None:
    often, rarely = Step(0), Step(0)
    scheduler = Scheduler()
    scheduler.every("often", often, SHORT)
    scheduler.every("rarely", rarely, NEVER)
    async with running(scheduler):
        await often.ran(3)
    assert rarely.rounds == 1


async def test_a_job_waits_its_first_delay_before_its_first_round() -> None:
    first_later, other = Step(0), Step(0)
    scheduler = Scheduler()
    scheduler.every("first later", first_later, SHORT, first_after_seconds=NEVER)
    scheduler.every("other", other, SHORT)
    async with running(scheduler):
        await other.ran(3)
    assert first_later.rounds == 0


async def test_a_full_batch_is_followed_at_once_by_another_round() -> None:
    step = Step(3, 3, 2, 3)
    scheduler = Scheduler()
    scheduler.every("batches", step, NEVER, batch=3)
    async with running(scheduler):
        await step.ran(3)
        await asyncio.sleep(10 * SHORT)
    # Two full batches ran again at once; after the short one the job waits its interval.
    assert step.answers == [3, 3, 2]


async def test_a_step_that_does_not_count_waits_its_interval_even_with_a_batch() -> None:
    step = Step(None)
    scheduler = Scheduler()
    scheduler.every("uncounted", step, NEVER, batch=1)
    async with running(scheduler):
        await step.ran(1)
        await asyncio.sleep(10 * SHORT)
    assert step.rounds == 1


async def test_a_round_without_the_database_is_logged_as_skipped_and_the_next_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    step = Step(unavailable(), 0)
    scheduler = Scheduler()
    scheduler.every("lease sweep", step, SHORT)
    async with running(scheduler):
        await step.ran(2)
    assert step.answers[:2] == ["ServiceError", 0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["lease sweep skipped: the database is unavailable"]


async def test_an_unexpected_error_is_logged_with_its_stack_and_the_job_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    step = Step(RuntimeError("a bug"), 0)
    scheduler = Scheduler()
    scheduler.every("cleanup", step, SHORT)
    async with running(scheduler):
        await step.ran(3)
    assert step.answers[:3] == ["RuntimeError", 0, 0]
    [error] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert error.getMessage() == "cleanup failed unexpectedly"
    assert error.exc_info is not None
    assert isinstance(error.exc_info[1], RuntimeError)


async def test_a_one_shot_runs_once_even_when_it_fails() -> None:
    once, failing_once, other = Step(0), Step(RuntimeError("a bug")), Step(0)
    scheduler = Scheduler()
    scheduler.once("once", once)
    scheduler.once("failing once", failing_once)
    scheduler.every("other", other, SHORT)
    async with running(scheduler):
        await other.ran(5)
    assert (once.rounds, failing_once.rounds) == (1, 1)


async def test_stopping_cancels_every_job_even_midway_through_a_round() -> None:
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    repeating = Step(0)
    scheduler = Scheduler()
    scheduler.once("stuck", stuck)
    scheduler.every("repeating", repeating, SHORT)
    scheduler.start()
    await repeating.ran(2)
    await scheduler.stop()

    assert cancelled.is_set()
    assert not [t for t in asyncio.all_tasks() if t.get_name() in ("stuck", "repeating")]
    rounds = repeating.rounds
    await asyncio.sleep(10 * SHORT)
    assert repeating.rounds == rounds
