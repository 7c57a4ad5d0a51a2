"""Fair shares of the unit's task slots between the users whose executions run on it.

Each submitter's jobs go to a FAIR scheduler pool of its own, so Spark schedules FAIR between
submitters, then between each one's running stages: a free slot goes to the submitter holding
the fewest. Spark never takes a running task's slot back, though, so a guest whose tasks run
for minutes would keep every slot it took while the unit was idle. While two submitters or more
have executions running, a loop reads Spark's active stages every TICK_SECONDS and kills the
running attempts that keep a waiting submitter under its share (cu_service.slot_shares
decides; Spark runs a killed attempt again later without counting a failure). With one
submitter there is no loop: its cost is one pool made on its first execution.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass

from pyspark import SparkContext

from cu_service import pyspark_private
from cu_service.pyspark_private import ActiveStage
from cu_service.slot_shares import Attempt, Holding, preemptions, victims

log = logging.getLogger("cu_service.slot_fairness")

#: Between two looks at the slots while they are shared: how late a waiting submitter is seen.
TICK_SECONDS = 0.1
#: A killed attempt counts as gone for this long, then as running again if it still is: Spark's
#: monitor of a Python task sees the kill within 2 s and then ends its worker at once
#: (spark.python.task.killTimeout is 0, see cu_service.spark).
KILL_LANDING_SECONDS = 3.0
KILL_REASON = "preempted: another user's execution waits for its share of the task slots"
POOL_PREFIX = "submitter-"


def pool_name(submitter: str) -> str:
    """The submitter's FAIR scheduler pool (its user id hashed: any characters, fixed length,
    and no user id in Spark's logs)."""
    return POOL_PREFIX + hashlib.sha256(submitter.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Killing:
    submitter: str
    until: float


class SlotFairness:
    """The submitters' pools, and the loop that keeps their shares while two or more run."""

    def __init__(self, context: SparkContext, slots: int | None = None) -> None:
        """slots: the task slots Spark has, where not its default parallelism (a local unit's;
        see cu_service.spark.task_slots)."""
        self._context = context
        self._slots = slots
        #: Running executions per submitter (none listed with zero).
        self._running: dict[str, int] = {}
        #: Each pool made so far, and whose it is.
        self._pools: dict[str, str] = {}
        self._making = asyncio.Lock()
        self._loop: asyncio.Task[None] | None = None
        #: Attempts killed whose end Spark may not have seen yet, by task id (the loop's alone).
        self._killing: dict[int, _Killing] = {}

    async def enter(self, submitter: str) -> str:
        """Counts one more running execution of submitter; returns its pool, made (on a thread:
        it is the JVM's) before its first job."""
        pool = pool_name(submitter)
        async with self._making:
            if pool not in self._pools:
                try:
                    await asyncio.to_thread(pyspark_private.fair_pool, self._context, pool)
                except Exception:  # Spark makes the pool itself, FIFO: the execution still runs
                    log.exception("could not make a FAIR scheduler pool")
                self._pools[pool] = submitter
        self._running[submitter] = self._running.get(submitter, 0) + 1
        if len(self._running) > 1 and (self._loop is None or self._loop.done()):
            self._loop = asyncio.create_task(self._share_out())
        return pool

    def leave(self, submitter: str) -> None:
        """One running execution of submitter ended (the loop stops once one submitter is left)."""
        left = self._running.pop(submitter) - 1
        if left:
            self._running[submitter] = left

    def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()

    async def _share_out(self) -> None:
        while len(self._running) > 1:
            try:
                await asyncio.to_thread(self._rebalance, dict(self._pools))
            except Exception:  # py4j or Spark moving under it: the next look tries again
                log.exception("could not share the task slots out")
            await asyncio.sleep(TICK_SECONDS)
        self._killing.clear()

    def _rebalance(self, pools: dict[str, str]) -> None:
        """One look at the slots, killing what keeps a waiting submitter under its share."""
        now = time.monotonic()
        self._killing = {t: k for t, k in self._killing.items() if k.until > now}
        running: Counter[str] = Counter()
        for killing in self._killing.values():  # counted as given up already
            running[killing.submitter] -= 1
        waiting: Counter[str] = Counter()
        stages: dict[str, list[ActiveStage]] = {}
        busy = 0
        for stage in pyspark_private.active_stages(self._context):
            busy += stage.active
            submitter = pools.get(stage.pool)
            if submitter is None:  # not an execution's (a warm-up's): it keeps its slots
                continue
            running[submitter] += stage.active
            waiting[submitter] += max(0, stage.tasks - stage.active - stage.completed)
            stages.setdefault(submitter, []).append(stage)
        holdings = [Holding(s, max(0, running[s]), waiting[s]) for s in stages]
        slots = self._slots or self._context.defaultParallelism
        free = slots - busy + len(self._killing)
        for submitter, count in preemptions(holdings, free).items():
            self._kill(submitter, stages[submitter], count, now)

    def _kill(self, submitter: str, stages: list[ActiveStage], count: int, now: float) -> None:
        attempts = [
            Attempt(task_id, launched_ms)
            for stage in stages
            for task_id, launched_ms in pyspark_private.running_attempts(self._context, stage)
            if task_id not in self._killing
        ]
        for attempt in victims(attempts, count):
            if pyspark_private.kill_task_attempt(self._context, attempt.task_id, KILL_REASON):
                self._killing[attempt.task_id] = _Killing(submitter, now + KILL_LANDING_SECONDS)
                log.info("task attempt preempted", extra={"task_id": attempt.task_id})
