"""Which outputs of an execution readers may see: decided by the execution's state in the
registry at read time, never by what is in storage.

A running execution shows what it has committed so far and a succeeded one all of it. A
queued one has nothing yet; a failed or cancelled one shows nothing, whatever is left of its
tables: reading one of its outputs is NOT_FOUND (RESULT_NOT_FOUND), as for any result that does
not exist, and the ErrorInfo's metadata `execution_state` and the message say why.
Statistics and console messages are not results: they stay readable in every state.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from service_runtime.errors import Resource, not_found
from texera.lake.v1 import execution_pb2

EX = execution_pb2
_VISIBLE = (EX.EXECUTION_STATE_RUNNING, EX.EXECUTION_STATE_SUCCEEDED)
_WITHDRAWN = (EX.EXECUTION_STATE_FAILED, EX.EXECUTION_STATE_CANCELLED)


def _name(execution: execution_pb2.Execution, operator_id: str) -> str:
    return f"{operator_id} of execution {execution.execution_id}"


def visible_outputs(execution: execution_pb2.Execution) -> Sequence[execution_pb2.ExecutionOutput]:
    """The outputs a reader may see now: none unless the execution runs or succeeded."""
    return execution.outputs if execution.state in _VISIBLE else ()


def visible_output(
    execution: execution_pb2.Execution, operator_id: str
) -> execution_pb2.ExecutionOutput:
    """The output, if a reader may see it now; else NOT_FOUND naming it."""
    if execution.state in _WITHDRAWN:
        state = EX.ExecutionState.Name(execution.state).removeprefix("EXECUTION_STATE_")
        error = not_found(
            Resource.RESULT,
            _name(execution, operator_id),
            f"its execution ended {state}, so none of its results are served; its console "
            "messages say why",
        )
        error.metadata["execution_state"] = state
        raise error
    for output in visible_outputs(execution):
        if output.operator_id == operator_id:
            return output
    raise not_found(Resource.RESULT, _name(execution, operator_id))


class StillVisible:
    """Re-checks, while a stream serves rows of a running execution, that the registry still
    lets them be seen: at most once per interval, so a long stream costs a registry call per
    interval, not per batch. A succeeded execution is final and is not asked again."""

    def __init__(
        self,
        execution: execution_pb2.Execution,
        operator_id: str,
        resolve: Callable[[], Awaitable[execution_pb2.Execution]],
        interval_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._running = execution.state == EX.EXECUTION_STATE_RUNNING
        self._operator_id = operator_id
        self._resolve = resolve
        self._interval = interval_seconds
        self._clock = clock
        self._checked_at = clock()

    async def confirm(self) -> None:
        """Raises NOT_FOUND (see visible_output) once the execution is no longer visible."""
        if not self._running or self._clock() - self._checked_at < self._interval:
            return
        execution = await self._resolve()
        self._checked_at = self._clock()
        visible_output(execution, self._operator_id)
        self._running = execution.state == EX.EXECUTION_STATE_RUNNING
