"""An execution's progress as Spark's status tracker sees it: stages and tasks of its job group.

Reading it calls into the JVM, so it runs off the event loop (see the manager).

What a watcher sees must only move forward: the totals never shrink and what is done never
exceeds them. Spark's own counts do neither on their own: a stage whose output Spark reuses from
an earlier job is planned but never runs (it is *skipped*), so counting it as pending leaves the
total ahead of what can ever be done, and dropping it once the run ends shrinks the total. Here
a skipped stage counts as done as soon as it is known to be skipped, and each sample is merged
into the one shown before (see StageCounts.after).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyspark import SparkContext, SparkStageInfo

from texera.lake.v1 import execution_pb2


@dataclass(frozen=True)
class StageCounts:
    stages_total: int
    stages_completed: int
    tasks_total: int
    tasks_completed: int

    @classmethod
    def shown_in(cls, progress: execution_pb2.ExecutionProgress) -> StageCounts:
        return cls(
            progress.stages_total,
            progress.stages_completed,
            progress.tasks_total,
            progress.tasks_completed,
        )

    def after(self, shown: StageCounts) -> StageCounts:
        """These counts as they may follow shown: no total below shown's, nothing done below
        shown's, and never more done than the total."""
        stages_total = max(self.stages_total, shown.stages_total)
        tasks_total = max(self.tasks_total, shown.tasks_total)
        return StageCounts(
            stages_total,
            min(max(self.stages_completed, shown.stages_completed), stages_total),
            tasks_total,
            min(max(self.tasks_completed, shown.tasks_completed), tasks_total),
        )

    def copy_to(self, progress: execution_pb2.ExecutionProgress) -> None:
        progress.stages_total = self.stages_total
        progress.stages_completed = self.stages_completed
        progress.tasks_total = self.tasks_total
        progress.tasks_completed = self.tasks_completed


def _started(stage: SparkStageInfo) -> bool:
    return stage.numCompletedTasks + stage.numActiveTasks + stage.numFailedTasks > 0


def count_stages(jobs: Iterable[Sequence[SparkStageInfo]], *, final: bool = False) -> StageCounts:
    """The counts of the stages of jobs (each job's stages in Spark's order, parents first).

    A stage that never started is skipped once a later stage of its job has started (stages
    run after their parents), or once the run has succeeded (final)."""
    stages = total_tasks = done_stages = done_tasks = 0
    for job in jobs:
        started_after = final
        for stage in reversed(job):
            stages += 1
            total_tasks += stage.numTasks
            if _started(stage):
                started_after = True
                done = min(stage.numCompletedTasks, stage.numTasks)
            else:
                done = stage.numTasks if started_after else 0
            done_tasks += done
            done_stages += done >= stage.numTasks
    return StageCounts(stages, done_stages, total_tasks, done_tasks)


def stage_counts(context: SparkContext, group: str, *, final: bool = False) -> StageCounts:
    """final: the run succeeded, so stages that never started were skipped."""
    tracker = context.statusTracker()
    jobs = (
        sorted(
            (
                info
                for stage_id in job.stageIds
                if (info := tracker.getStageInfo(stage_id)) is not None
            ),
            key=lambda info: info.stageId,
        )
        for job_id in tracker.getJobIdsForGroup(group)
        if (job := tracker.getJobInfo(job_id)) is not None
    )
    return count_stages(jobs, final=final)
