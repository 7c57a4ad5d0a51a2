"""An execution's view and its registry sync: a final state is decided, sent to the registry,
and shown only as the registry recorded it; watchers see every change until then."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest

from cu_service.execution_view import LocalExecution
from cu_service.progress import StageCounts
from cu_service.registry import RegistryClient
from cu_service.registry_sync import sync_with_registry
from cu_service.writer.output import WrittenOutput
from service_runtime.errors import ServiceError
from texera.lake.v1 import execution_pb2

EX = execution_pb2


def queued() -> LocalExecution:
    execution = EX.Execution(
        execution_id="e-1", owner_user_id="alice", state=EX.EXECUTION_STATE_QUEUED
    )
    return LocalExecution(execution=execution, fingerprint="f", group="execution-e-1")


OUTPUT = WrittenOutput(
    "result", "results", "e_1_result", rows=10, committed_rows=8, snapshot_id=7, commits=1
)


class Ledger:
    """Stands in for the registry's ledger: records what it is sent, as the registry's
    ReportExecution does, or fails with the errors given first."""

    def __init__(self, *failures: ServiceError, record: EX.Execution | None = None) -> None:
        self.failures = list(failures)
        self.reports: list[EX.Execution] = []
        #: What ResolveExecution answers: the ledger's record of an execution it ended itself.
        self.record = record
        self.resolved = 0

    async def resolve_execution(self, execution_id: str) -> Any:
        assert self.record is not None, "the ledger was asked for a record it does not hold"
        self.resolved += 1
        return SimpleNamespace(execution=self.record)

    async def report(self, execution_id: str, state: int, **fields: Any) -> EX.Execution:
        if self.failures:
            raise self.failures.pop(0)
        recorded = EX.Execution(execution_id=execution_id, state=state)  # type: ignore[arg-type]
        recorded.outputs.extend(fields["outputs"])
        if fields["error"] is not None:
            recorded.error.CopyFrom(fields["error"])
        recorded.workflow_id = "as recorded"
        self.reports.append(recorded)
        return recorded


async def never_cancel(local: LocalExecution, why: str) -> None:
    raise AssertionError(f"cancelled: {why}")


async def test_the_view_moves_from_queued_to_running_with_progress() -> None:
    local = queued()
    seen = local.updated
    local.mark_running()
    assert seen.is_set()
    assert local.dirty.is_set()
    assert local.execution.state == EX.EXECUTION_STATE_RUNNING
    assert local.execution.HasField("start_time")

    local.mark_progress([OUTPUT])
    [output] = local.execution.outputs
    assert (output.row_count, output.snapshot_id) == (8, 7)
    assert local.execution.progress.rows_written == 10
    assert local.execution.progress.commits == 1


async def test_progress_counts_never_go_back() -> None:
    local = queued()
    local.mark_running()
    local.show_progress(StageCounts(2, 1, 10, 6))
    local.show_progress(StageCounts(1, 0, 4, 2))  # an older sample
    progress = local.execution.progress
    assert (progress.stages_total, progress.stages_completed) == (2, 1)
    assert (progress.tasks_total, progress.tasks_completed) == (10, 6)


async def test_a_final_state_is_decided_before_it_is_shown() -> None:
    local = queued()
    local.mark_running()
    local.mark_progress([OUTPUT])
    error = EX.ExecutionError(reason="CANCELLED_BY_USER", message="stop")
    local.mark_finished(EX.EXECUTION_STATE_CANCELLED, error)

    assert local.terminal
    assert local.decided.is_set()
    assert local.execution.state == EX.EXECUTION_STATE_RUNNING  # not shown yet
    assert local.final is not None
    assert local.final.state == EX.EXECUTION_STATE_CANCELLED
    assert list(local.final.outputs) == []  # a cancelled execution's results are dropped

    local.mark_running()  # too late: nothing changes once decided
    local.mark_finished(EX.EXECUTION_STATE_SUCCEEDED, None)
    assert local.final.state == EX.EXECUTION_STATE_CANCELLED


async def test_the_sync_shows_the_final_state_as_the_registry_recorded_it() -> None:
    local = queued()
    ledger = Ledger()
    watched: list[int] = []

    async def watch() -> None:
        async for view in local.watch():
            watched.append(view.state)

    watching = asyncio.create_task(watch())
    syncing = asyncio.create_task(
        sync_with_registry(local, cast(RegistryClient, ledger), never_cancel)
    )
    await asyncio.sleep(0)
    local.mark_running()
    local.mark_progress([OUTPUT])
    local.mark_finished(EX.EXECUTION_STATE_SUCCEEDED, None)
    await asyncio.wait_for(syncing, 5)
    await asyncio.wait_for(watching, 5)

    assert local.execution.state == EX.EXECUTION_STATE_SUCCEEDED
    assert local.execution.workflow_id == "as recorded"
    assert ledger.reports[-1].state == EX.EXECUTION_STATE_SUCCEEDED
    assert [o.table_name for o in ledger.reports[-1].outputs] == ["e_1_result"]
    assert watched[0] == EX.EXECUTION_STATE_QUEUED
    assert watched[-1] == EX.EXECUTION_STATE_SUCCEEDED
    assert watched.count(EX.EXECUTION_STATE_SUCCEEDED) == 1


async def test_a_final_state_the_registry_did_not_take_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("cu_service.registry_sync.REPORT_RETRY_SECONDS", 0.01)
    local = queued()
    ledger = Ledger(ServiceError(grpc.StatusCode.UNAVAILABLE, "the registry restarts"))
    local.mark_finished(EX.EXECUTION_STATE_FAILED, EX.ExecutionError(reason="X", message="m"))
    await asyncio.wait_for(sync_with_registry(local, cast(RegistryClient, ledger), never_cancel), 5)
    assert [r.state for r in ledger.reports] == [EX.EXECUTION_STATE_FAILED]
    assert local.execution.state == EX.EXECUTION_STATE_FAILED
    assert local.execution.error.reason == "X"


LOST = EX.Execution(
    execution_id="e-1",
    state=EX.EXECUTION_STATE_FAILED,
    error=EX.ExecutionError(reason="COMPUTING_UNIT_LOST", message="its lease lapsed"),
)


async def test_an_execution_the_registry_ended_is_cancelled_and_shown_as_the_ledger_has_it() -> (
    None
):
    local = queued()
    local.mark_running()
    ledger = Ledger(
        ServiceError(grpc.StatusCode.FAILED_PRECONDITION, "the lease lapsed"), record=LOST
    )
    reasons: list[str] = []

    async def cancel(cancelled: LocalExecution, why: str) -> None:
        reasons.append(why)
        cancelled.mark_finished(EX.EXECUTION_STATE_CANCELLED, None)

    await asyncio.wait_for(sync_with_registry(local, cast(RegistryClient, ledger), cancel), 5)
    assert reasons == ["the registry ended the execution: the lease lapsed"]
    assert ledger.reports == []  # its word was final: nothing more is sent
    assert local.execution.state == EX.EXECUTION_STATE_FAILED
    assert local.execution.error.reason == "COMPUTING_UNIT_LOST"


async def test_a_success_the_registry_refused_is_never_shown() -> None:
    """The run succeeded here after the registry had failed it (its lease lapsed): watchers
    see the ledger's FAILED, the only state anyone else can read, never SUCCEEDED."""
    local = queued()
    ledger = Ledger(
        ServiceError(grpc.StatusCode.FAILED_PRECONDITION, "already ended failed"), record=LOST
    )
    watched: list[int] = []

    async def watch() -> None:
        async for view in local.watch():
            watched.append(view.state)

    async def cancel(cancelled: LocalExecution, why: str) -> None:
        assert cancelled.terminal  # nothing left to stop

    watching = asyncio.create_task(watch())
    await asyncio.sleep(0)
    local.mark_running()
    local.mark_progress([OUTPUT])
    local.mark_finished(EX.EXECUTION_STATE_SUCCEEDED, None)
    await asyncio.wait_for(sync_with_registry(local, cast(RegistryClient, ledger), cancel), 5)
    await asyncio.wait_for(watching, 5)

    assert ledger.resolved == 1
    assert local.execution.state == EX.EXECUTION_STATE_FAILED
    assert list(local.execution.outputs) == []
    assert EX.EXECUTION_STATE_SUCCEEDED not in watched
    assert watched[-1] == EX.EXECUTION_STATE_FAILED
