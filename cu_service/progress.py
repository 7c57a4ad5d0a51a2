"""An execution's progress as Spark's status tracker sees it: stages and tasks of its job group.

Reading it calls into the JVM, so it runs off the event loop (see the manager).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import SparkContext

from texera.lake.v1 import execution_pb2


@dataclass(frozen=True)
class StageCounts:
    stages_total: int
    stages_completed: int
    tasks_total: int
    tasks_completed: int

    def differs_from(self, progress: execution_pb2.ExecutionProgress) -> bool:
        return self != StageCounts(
            progress.stages_total,
            progress.stages_completed,
            progress.tasks_total,
            progress.tasks_completed,
        )

    def copy_to(self, progress: execution_pb2.ExecutionProgress) -> None:
        progress.stages_total = self.stages_total
        progress.stages_completed = self.stages_completed
        progress.tasks_total = self.tasks_total
        progress.tasks_completed = self.tasks_completed


def stage_counts(context: SparkContext, group: str, *, final: bool = False) -> StageCounts:
    """final: the run is over, so stages that never started were skipped (Spark reused
    their output) and do not count."""
    tracker = context.statusTracker()
    stages = [
        info
        for job_id in tracker.getJobIdsForGroup(group)
        if (job := tracker.getJobInfo(job_id)) is not None
        for stage_id in job.stageIds
        if (info := tracker.getStageInfo(stage_id)) is not None
        and not (final and info.numCompletedTasks + info.numActiveTasks + info.numFailedTasks == 0)
    ]
    return StageCounts(
        len(stages),
        sum(1 for s in stages if s.numCompletedTasks >= s.numTasks),
        sum(s.numTasks for s in stages),
        sum(s.numCompletedTasks for s in stages),
    )
