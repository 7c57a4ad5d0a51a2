"""The unit's view of one of its executions, and the state changes it goes through.

QUEUED -> RUNNING -> a final state. A final state is decided first (`final`) and shown only
once the registry has recorded it (see registry_sync), so whoever sees SUCCEEDED can read the
results at once. Every change wakes the execution's watchers and its registry sync. Changes
happen on the event loop's thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from cu_service.progress import StageCounts
from cu_service.writer.output import WrittenOutput
from service_runtime.execution_states import TERMINAL
from texera.lake.v1 import execution_pb2

log = logging.getLogger("cu_service.execution_view")
EX = execution_pb2


def _now() -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


@dataclass
class LocalExecution:
    """The unit's view of one of its executions."""

    execution: execution_pb2.Execution
    fingerprint: str
    group: str
    cancel_reason: str | None = None
    #: Set when the execution ran out of time and is being stopped.
    time_limit_reason: str | None = None
    #: The final view, decided and waiting for the registry to record it before it is shown.
    final: execution_pb2.Execution | None = None
    #: Set with final: the registry sync sends it without waiting out its pause.
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    updated: asyncio.Event = field(default_factory=asyncio.Event)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.execution.owner_user_id

    @property
    def terminal(self) -> bool:
        """Its final state is decided (shown or still being recorded)."""
        return self.final is not None or self.execution.state in TERMINAL

    def snapshot(self) -> execution_pb2.Execution:
        copied = execution_pb2.Execution()
        copied.CopyFrom(self.execution)
        return copied

    def changed(self) -> None:
        """Wakes watchers and the registry sync."""
        previous, self.updated = self.updated, asyncio.Event()
        previous.set()
        self.dirty.set()

    def show(self, recorded: execution_pb2.Execution) -> None:
        """Shows the registry's record of the final state."""
        self.execution.CopyFrom(recorded)
        self.changed()

    def mark_running(self) -> None:
        if not self.terminal:
            self.execution.state = EX.EXECUTION_STATE_RUNNING
            self.execution.start_time.CopyFrom(_now())
            self.changed()

    def mark_progress(self, outputs: list[WrittenOutput]) -> None:
        if self.terminal:
            return
        del self.execution.outputs[:]
        self.execution.outputs.extend(
            EX.ExecutionOutput(
                operator_id=o.operator_id,
                namespace=o.namespace,
                table_name=o.table_name,
                row_count=o.committed_rows,
                snapshot_id=o.snapshot_id,
                file_count=o.committed_files,
            )
            for o in outputs
        )
        self.execution.progress.rows_written = sum(o.rows for o in outputs)
        self.execution.progress.commits = sum(o.commits for o in outputs)
        self.changed()

    def show_progress(self, counts: StageCounts) -> None:
        """Spark's stage and task counts, where they moved on from those shown."""
        shown = StageCounts.shown_in(self.execution.progress)
        if not self.terminal and (counts := counts.after(shown)) != shown:
            counts.copy_to(self.execution.progress)
            self.changed()

    def mark_finished(
        self,
        state: execution_pb2.ExecutionState.ValueType,
        error: execution_pb2.ExecutionError | None,
        counts: StageCounts | None = None,
    ) -> None:
        """Decides the final state; counts: the run's last stage and task counts, if it ran
        (the periodic sample may predate its last tasks)."""
        if self.terminal:
            return
        if counts is not None:
            self.show_progress(counts)
        final = self.snapshot()
        final.state = state
        final.end_time.CopyFrom(_now())
        if error is not None:
            final.error.CopyFrom(error)
        if state != EX.EXECUTION_STATE_SUCCEEDED:
            del final.outputs[:]  # dropped with the partial results
        self.final = final
        self.decided.set()
        self.dirty.set()  # shown once the registry has it
        log.info(
            "execution ended",
            extra={
                "execution_id": self.execution.execution_id,
                "state": EX.ExecutionState.Name(state),
            },
        )

    async def watch(self) -> AsyncIterator[execution_pb2.Execution]:
        """The view now and after every change, until a final state is shown."""
        while True:
            changed = self.updated
            snapshot = self.snapshot()
            yield snapshot
            if snapshot.state in TERMINAL:
                return
            await changed.wait()

    async def shown(self) -> None:
        """Waits until the final state is recorded and shown."""
        while self.execution.state not in TERMINAL:
            await self.updated.wait()
