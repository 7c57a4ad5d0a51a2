"""Which outputs readers see follows the execution's state, and a stream of a running
execution stops once the registry says it failed."""

from __future__ import annotations

import grpc
import pytest

from result_service.visibility import StillVisible, visible_output, visible_outputs
from service_runtime.errors import ServiceError
from texera.lake.v1 import execution_pb2

EX = execution_pb2


def execution(state: int) -> execution_pb2.Execution:
    return EX.Execution(
        execution_id="e1",
        state=state,  # type: ignore[arg-type]
        outputs=[EX.ExecutionOutput(operator_id="a", table_name="t_a", row_count=3)],
    )


@pytest.mark.parametrize("state", [EX.EXECUTION_STATE_RUNNING, EX.EXECUTION_STATE_SUCCEEDED])
def test_running_and_succeeded_executions_show_their_outputs(state: int) -> None:
    shown = execution(state)
    assert [o.operator_id for o in visible_outputs(shown)] == ["a"]
    assert visible_output(shown, "a").table_name == "t_a"


@pytest.mark.parametrize(
    ("state", "shown_state"),
    [
        (EX.EXECUTION_STATE_FAILED, "FAILED"),
        (EX.EXECUTION_STATE_CANCELLED, "CANCELLED"),
        (EX.EXECUTION_STATE_QUEUED, None),
    ],
)
def test_other_states_show_nothing_whatever_the_ledger_lists(
    state: int, shown_state: str | None
) -> None:
    hidden = execution(state)
    assert list(visible_outputs(hidden)) == []
    with pytest.raises(ServiceError) as raised:
        visible_output(hidden, "a")
    assert raised.value.code == grpc.StatusCode.NOT_FOUND
    assert raised.value.reason == "RESULT_NOT_FOUND"
    assert "result a of execution e1 not found" in raised.value.message
    assert raised.value.metadata.get("execution_state") == shown_state
    if shown_state is not None:
        assert f"its execution ended {shown_state}" in raised.value.message


def test_an_unknown_output_is_not_found() -> None:
    with pytest.raises(ServiceError) as raised:
        visible_output(execution(EX.EXECUTION_STATE_SUCCEEDED), "b")
    assert raised.value.code == grpc.StatusCode.NOT_FOUND


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_stream_asks_the_registry_at_most_once_per_interval_and_stops_on_failure() -> None:
    clock, states, asked = Clock(), [EX.EXECUTION_STATE_RUNNING], []

    async def resolve() -> execution_pb2.Execution:
        asked.append(clock.now)
        return execution(states[-1])

    still = StillVisible(execution(EX.EXECUTION_STATE_RUNNING), "a", resolve, 1.0, clock)
    for _ in range(50):  # many batches within one interval: no registry call
        await still.confirm()
    assert asked == []
    clock.now += 1.5
    await still.confirm()
    await still.confirm()
    assert asked == [101.5]
    states.append(EX.EXECUTION_STATE_FAILED)
    await still.confirm()  # not due yet
    clock.now += 1.0
    with pytest.raises(ServiceError) as raised:
        await still.confirm()
    assert raised.value.code == grpc.StatusCode.NOT_FOUND
    assert raised.value.metadata["execution_state"] == "FAILED"


async def test_a_succeeded_execution_is_not_asked_again() -> None:
    clock = Clock()

    async def resolve() -> execution_pb2.Execution:
        raise AssertionError("a succeeded execution's state is final")

    still = StillVisible(execution(EX.EXECUTION_STATE_SUCCEEDED), "a", resolve, 1.0, clock)
    clock.now += 60
    await still.confirm()


async def test_a_stream_stops_asking_once_the_execution_succeeded() -> None:
    clock, asked = Clock(), []

    async def resolve() -> execution_pb2.Execution:
        asked.append(clock.now)
        return execution(EX.EXECUTION_STATE_SUCCEEDED)

    still = StillVisible(execution(EX.EXECUTION_STATE_RUNNING), "a", resolve, 1.0, clock)
    for _ in range(3):
        clock.now += 2
        await still.confirm()
    assert asked == [102.0]
