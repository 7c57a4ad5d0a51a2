"""Who is over their share of a unit's task slots, and which running attempts to take back.

Spark's FAIR scheduler hands a free slot to the submitter (pool) holding the fewest, but it
never takes a slot back: a submitter whose tasks run for minutes keeps every slot it took
while nobody else wanted one. These are the decisions that restore the shares (pure, so that
they are tested alone; cu_service.slot_fairness reads Spark and kills the attempts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Holding:
    """What one submitter holds of the slots and still waits for."""

    submitter: str
    #: Attempts running, not counting those already being killed.
    running: int
    #: Tasks of its running stages that wait for a slot.
    waiting: int


@dataclass(frozen=True)
class Attempt:
    """A running task attempt of a submitter."""

    task_id: int
    launched_ms: int


def preemptions(holdings: Sequence[Holding], free_slots: int) -> Counter[str]:
    """How many running attempts to kill of each submitter so that every submitter that waits
    for slots holds as many as the others, within one (max-min fairness over what each wants).

    Plays Spark's scheduling forward: a free slot goes to the waiting submitter that holds the
    fewest; with none free, the one holding the most gives one up, but only to a submitter
    holding at least two fewer (one fewer would only swap who is ahead, and the next round
    would take it back). Each step lowers the sum of squares of what each holds, so it ends.
    """
    running = {h.submitter: h.running for h in holdings}
    waiting = {h.submitter: h.waiting for h in holdings}
    free = max(0, free_slots)
    kills: Counter[str] = Counter()
    while wanting := [s for s in running if waiting[s] > 0]:
        needy = min(wanting, key=lambda s: (running[s], s))
        if free > 0:
            free -= 1  # Spark gives it to the needy without anyone's attempt killed
        else:
            donor = max(running, key=lambda s: (running[s], s))
            if running[donor] < running[needy] + 2:
                break
            running[donor] -= 1
            waiting[donor] += 1  # Spark runs a killed attempt again later
            kills[donor] += 1
        running[needy] += 1
        waiting[needy] -= 1
    return kills


def victims(attempts: Sequence[Attempt], count: int) -> list[Attempt]:
    """The attempts to kill: the latest launched, which lose the least work when run again."""
    return sorted(attempts, key=lambda a: (a.launched_ms, a.task_id), reverse=True)[:count]
