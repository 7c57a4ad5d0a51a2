"""An execution's progress only moves forward: totals never shrink, done never exceeds them."""

from __future__ import annotations

from pyspark import SparkStageInfo

from cu_service.progress import StageCounts, count_stages
from lake_cli.render import progress_bar


def stage(stage_id: int, tasks: int, completed: int = 0, active: int = 0) -> SparkStageInfo:
    return SparkStageInfo(stage_id, 0, f"stage {stage_id}", tasks, active, completed, 0)


def test_a_stage_reused_from_an_earlier_job_counts_as_done_once_its_job_moves_past_it() -> None:
    first_job = [stage(0, 7, completed=7)]
    # The second job plans the first's shuffle again (stage 1), but Spark reuses its output.
    waiting = [stage(1, 7), stage(2, 7)]
    running = [stage(1, 7), stage(2, 7, completed=3, active=4)]
    assert count_stages([first_job]) == StageCounts(1, 1, 7, 7)
    assert count_stages([first_job, waiting]) == StageCounts(3, 1, 21, 7)
    assert count_stages([first_job, running]) == StageCounts(3, 2, 21, 17)


def test_when_the_run_succeeds_stages_that_never_ran_were_skipped() -> None:
    jobs = [[stage(0, 7, completed=7)], [stage(1, 7), stage(2, 7, completed=7)]]
    assert count_stages(jobs, final=True) == StageCounts(3, 3, 21, 21)
    never_reached = [[stage(0, 7, completed=7), stage(1, 7)]]
    assert count_stages(never_reached) == StageCounts(2, 1, 14, 7)
    assert count_stages(never_reached, final=True) == StageCounts(2, 2, 14, 14)


def test_speculative_or_retried_tasks_never_count_beyond_their_stage() -> None:
    assert count_stages([[stage(0, 4, completed=6)]]) == StageCounts(1, 1, 4, 4)


def test_counts_shown_never_go_back() -> None:
    shown = StageCounts(2, 2, 14, 14)
    assert StageCounts(1, 1, 7, 7).after(shown) == shown
    assert StageCounts(3, 1, 21, 3).after(shown) == StageCounts(3, 2, 21, 14)
    assert StageCounts(3, 3, 21, 21).after(shown) == StageCounts(3, 3, 21, 21)
    assert StageCounts(1, 1, 7, 9).after(StageCounts(0, 0, 0, 0)) == StageCounts(1, 1, 7, 7)


def test_a_sequence_of_samples_is_monotonic_and_bounded() -> None:
    samples = [
        StageCounts(1, 0, 7, 3),
        StageCounts(1, 1, 7, 7),
        StageCounts(2, 1, 14, 7),
        StageCounts(1, 1, 7, 7),  # a later sample that forgot a stage
        StageCounts(2, 2, 14, 16),
    ]
    shown = StageCounts(0, 0, 0, 0)
    for sample in samples:
        following = sample.after(shown)
        assert following.tasks_total >= shown.tasks_total
        assert shown.tasks_completed <= following.tasks_completed <= following.tasks_total
        assert following.stages_completed <= following.stages_total
        shown = following
    assert shown == StageCounts(2, 2, 14, 14)


def test_the_bar_is_never_overfull() -> None:
    assert progress_bar(9, 7, width=10) == "[##########]"
    assert progress_bar(7, 14, width=10) == "[#####.....]"
    assert progress_bar(3, 0, width=4) == "[....]"
