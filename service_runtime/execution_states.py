"""Execution states as the mesh's services and its callers read them."""

from __future__ import annotations

from texera.lake.v1 import execution_pb2

#: States an execution never leaves.
TERMINAL = frozenset(
    {
        execution_pb2.EXECUTION_STATE_SUCCEEDED,
        execution_pb2.EXECUTION_STATE_FAILED,
        execution_pb2.EXECUTION_STATE_CANCELLED,
    }
)


def state_name(execution: execution_pb2.Execution) -> str:
    """The execution's state without its enum prefix: RUNNING, SUCCEEDED, ..."""
    return execution_pb2.ExecutionState.Name(execution.state).removeprefix("EXECUTION_STATE_")
