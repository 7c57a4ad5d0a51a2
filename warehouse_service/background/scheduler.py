"""The one scheduler of a registry process's background work: each job is a step, run in a
task of its own, again every interval or once at start.

A step works what is due and answers how many items it took (None when it does not count).
A job given a batch runs again at once after a round that took a full batch, since more are
likely due. A round whose step finds the database unavailable (ServiceError) is logged as
skipped, and the next round comes as usual. Any other exception is logged with its stack and
the job goes on too: one round that failed for a reason nobody foresaw must not end that work
for the rest of the process's life, unnoticed, as it did when each worker ran its own loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service_runtime.errors import ServiceError

log = logging.getLogger("warehouse_service.background.scheduler")

#: One round of a job: how many items it took, or None.
Step = Callable[[], Awaitable[int | None]]


@dataclass(frozen=True)
class _Job:
    name: str
    step: Step
    #: None: the job runs once.
    interval_seconds: float | None
    batch: int | None = None
    first_after_seconds: float = 0.0


class Scheduler:
    """The background jobs of one registry process: registered by name, started and stopped
    together."""

    def __init__(self) -> None:
        self._jobs: list[_Job] = []
        self._tasks: list[asyncio.Task[None]] = []

    def every(
        self,
        name: str,
        step: Step,
        interval_seconds: float,
        *,
        batch: int | None = None,
        first_after_seconds: float = 0.0,
    ) -> None:
        """Runs step every interval_seconds, the first time first_after_seconds after start;
        with batch, again at once after a round that took batch items."""
        self._jobs.append(_Job(name, step, interval_seconds, batch, first_after_seconds))

    def once(self, name: str, step: Step) -> None:
        """Runs step once, at start."""
        self._jobs.append(_Job(name, step, interval_seconds=None))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(_run(job), name=job.name) for job in self._jobs]

    async def stop(self) -> None:
        """Cancels every job, and returns once all of them have ended."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


async def _run(job: _Job) -> None:
    await asyncio.sleep(job.first_after_seconds)
    while True:
        taken = await _round(job)
        if job.interval_seconds is None:
            return
        if job.batch is None or taken is None or taken < job.batch:
            await asyncio.sleep(job.interval_seconds)


async def _round(job: _Job) -> int | None:
    try:
        return await job.step()
    except ServiceError:
        log.warning("%s skipped: the database is unavailable", job.name)
    except Exception:
        log.exception("%s failed unexpectedly", job.name)
    return None
