"""Executions that outlive every token the mesh issues, and every credential they use.

The stack here issues short-lived everything: the gateway's internal user tokens, the
catalog's tokens, the executions' gatekeeper tokens and the storage credentials it vends.
Executions submitted through the gateway (one on the owner's unit, one by a guest on the same,
shared unit) run several times longer than any of them, commit along the way and start a stage
after they all expired; they must succeed with exact rows, and no call of the mesh may be
refused meanwhile.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.execution_states import TERMINAL
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import share_unit, sleeping_udf, udf_workflow, workflow
from tests.integration.people import Person, person
from texera.lake.v1 import execution_pb2, workflow_pb2

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Lifetimes:
    """Seconds each credential lives, and how long a batch of the test's workflow sleeps."""

    user_token: int
    catalog_token: int
    storage: int
    batch_sleep: float
    partitions: int


def long_run_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, lifetimes: Lifetimes
) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp(name)))
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_GATEWAY_INTERNAL_TOKEN_SECONDS": str(lifetimes.user_token),
        "TEXERA_LAKE_DEV_CATALOG_TOKEN_LIFETIME_SECONDS": str(lifetimes.catalog_token),
        "TEXERA_LAKE_DEV_CATALOG_CREDENTIAL_LIFETIME_SECONDS": str(lifetimes.storage),
        # The shortest the registry allows: an execution's gatekeeper token is renewed too.
        "TEXERA_LAKE_WAREHOUSE_GATEKEEPER_TOKEN_SECONDS": "30",
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",  # a commit after every wave of tasks
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


SHORT = Lifetimes(user_token=10, catalog_token=15, storage=6, batch_sleep=1.0, partitions=24)
#: The lifetimes of the fault report: 60 s catalog tokens, 20 s storage credentials, and
#: executions of about three minutes.
REPORTED = Lifetimes(user_token=20, catalog_token=60, storage=20, batch_sleep=7.0, partitions=24)


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from long_run_stack(tmp_path_factory, "long-runs", SHORT)


@pytest.fixture(scope="module")
def as_reported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from long_run_stack(tmp_path_factory, "long-runs-reported", REPORTED)


def own_unit(owner: Person) -> str:
    return str(owner.create_unit("long runs", cores=2).computing_unit_id)


def long_workflow(lifetimes: Lifetimes) -> tuple[int, workflow_pb2.Workflow]:
    """A workflow whose first output is written in several waves (a commit after each) and
    whose second, an aggregate after a shuffle, starts once the first is written: after
    every credential issued at submission has expired."""
    rows = lifetimes.partitions * 100
    sleepy = sleeping_udf(lifetimes.batch_sleep)
    flow = workflow(
        [
            {
                "operator_id": "n",
                "range_source": {"end": rows, "partitions": lifetimes.partitions},
            },
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": sleepy,
                "materialize": True,
            },
            {
                "operator_id": "counted",
                "input_operator_ids": ["slow"],
                "aggregate": {
                    "group_by": ["id"],
                    "aggregations": [{"function": "AGGREGATE_FUNCTION_COUNT", "alias": "times"}],
                },
                "materialize": True,
            },
        ]
    )
    return rows, flow


def refused_calls(stack: Stack) -> list[str]:
    """Calls any service of the mesh refused as unauthenticated, from their logs."""
    refused = re.compile(r'"code": "UNAUTHENTICATED"')
    return [
        line
        for log in stack.log_dir.glob("*.log")
        for line in log.read_text(errors="replace").splitlines()
        if refused.search(line)
    ]


def run_to_the_end(
    people: list[tuple[Person, str]], lifetimes: Lifetimes
) -> list[tuple[Person, execution_pb2.Execution, float]]:
    """Submits the long workflow for each (person, unit) at once; each execution at its end
    with its run's length."""
    rows, flow = long_workflow(lifetimes)
    ended: list[tuple[Person, execution_pb2.Execution, float]] = []

    def one(who: Person, unit_id: str) -> None:
        started = time.monotonic()
        submitted = who.executions.submit(who.warehouse_id, flow, computing_unit_id=unit_id)
        execution = who.executions.finish(submitted.execution_id, timeout=1800)
        ended.append((who, execution, time.monotonic() - started))

    threads = [threading.Thread(target=one, args=pair) for pair in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ended) == len(people)
    for who, execution, _ in ended:
        assert execution.state in TERMINAL
        assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, execution.error
        by_output = {o.operator_id: o for o in execution.outputs}
        assert by_output["slow"].row_count == rows
        assert by_output["counted"].row_count == rows
        assert execution.progress.commits >= 3  # along the way, not only at the end
        slow, _ = who.results.all_rows(execution.execution_id, "slow")
        assert sorted(int(r["id"]) for r in slow) == list(range(rows))
        counted, _ = who.results.all_rows(execution.execution_id, "counted")
        assert sorted((int(r["id"]), int(r["times"])) for r in counted) == [
            (i, 1) for i in range(rows)
        ]
    return ended


def test_executions_outlive_every_token_on_an_owned_and_a_shared_unit(short_lived: Stack) -> None:
    alice, bob = person(short_lived, "long-alice"), person(short_lived, "long-bob")
    unit_id = own_unit(alice)
    share_unit(short_lived, unit_id, alice.user_id, bob.user_id)
    ended = run_to_the_end([(alice, unit_id), (bob, unit_id)], SHORT)
    longest_token = max(SHORT.user_token, SHORT.catalog_token, SHORT.storage)
    assert min(seconds for *_, seconds in ended) > 2 * longest_token
    assert refused_calls(short_lived) == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_three_executions_of_minutes_with_the_reported_lifetimes(as_reported: Stack) -> None:
    """Three users, each on a unit of their own, each running for about three minutes with
    60 s catalog tokens and 20 s storage credentials."""
    people = [person(as_reported, f"minutes-{n}") for n in range(3)]
    ended = run_to_the_end([(p, own_unit(p)) for p in people], REPORTED)
    assert min(seconds for *_, seconds in ended) > 150
    assert refused_calls(as_reported) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_watch_outlives_minutes_of_quiet(short_lived: Stack) -> None:
    """An execution whose state does not change for minutes, watched through the gateway:
    the gateway's channel to the unit pings the quiet stream every 30 s, which servers must
    accept (grpc's default ends the stream after about two minutes, "Too many pings")."""
    quiet = person(short_lived, "quiet")
    flow = udf_workflow("slow", sleeping_udf(150), end=10)
    submitted = quiet.executions.submit(quiet.warehouse_id, flow, computing_unit_id=own_unit(quiet))
    seen = quiet.executions.watch(submitted.execution_id, timeout=600)
    assert seen[-1].state == execution_pb2.EXECUTION_STATE_SUCCEEDED, seen[-1].error
