"""Limits of a computing unit: refused at submission where they can be known, else the execution
alone fails with RESOURCE_LIMIT while the unit keeps serving everyone else."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import grpc
import pytest

from cu_service.spark import closed_to_workers
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack, UnitHandle
from service_runtime.execution_states import state_name
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    bucket_keys,
    filtered_numbers,
    new_user,
    slow_workflow,
    udf,
    workflow,
)
from tests.integration.mesh import bad_fields, gateway_account, refused, unit_health
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EX = execution_pb2
RUN_SECONDS = 60
WORKER_MEMORY = 1024**3
OPEN_FILES = 256
LIMITED_ENV = {
    # Two task slots: a function that loops holds one until its run time is up, and the
    # other executions of the unit run in the other meanwhile.
    "TEXERA_LAKE_WAREHOUSE_UNIT_DEFAULT_CORES": "2",
    "TEXERA_LAKE_CU_CAPACITY": "4",
    "TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY": "1g",
    "TEXERA_LAKE_CU_MAX_OPERATORS": "6",
    "TEXERA_LAKE_CU_MAX_SOURCE_PARTITIONS": "8",
    "TEXERA_LAKE_CU_MAX_RANGE_ROWS": "1000000",
    "TEXERA_LAKE_CU_MAX_INLINE_ROWS": "3",
    "TEXERA_LAKE_CU_MAX_INLINE_BYTES": "400",
    "TEXERA_LAKE_CU_MAX_EXPRESSION_CHARS": "300",
    "TEXERA_LAKE_CU_MAX_EXPRESSION_DEPTH": "6",
    "TEXERA_LAKE_CU_MAX_RUN_SECONDS": str(RUN_SECONDS),
    "TEXERA_LAKE_CU_MAX_RESULT_BYTES": "400000",
    "TEXERA_LAKE_CU_WORKER_MEMORY_BYTES": str(WORKER_MEMORY),
    "TEXERA_LAKE_CU_WORKER_OPEN_FILES": str(OPEN_FILES),
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own whose registry launches computing units with small limits."""
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("limited")))
    with Stack(
        settings, ephemeral_ports=True, service_env={**TEST_STACK_ENV, **LIMITED_ENV}
    ) as running:
        yield running


def _unit(stack: Stack) -> UnitHandle:
    """The tests' shared unit of stack (see new_user)."""
    return stack.unit_for(SHARED_UNIT_OWNER)


def _materialized(operators: list[dict[str, Any]]) -> list[dict[str, Any]]:
    operators[-1]["materialize"] = True
    return operators


def _numbers(**range_source: Any) -> dict[str, Any]:
    return {"operator_id": "n", "range_source": {"end": 10, **range_source}}


def _filter(condition: str) -> dict[str, Any]:
    return {"operator_id": "f", "input_operator_ids": ["n"], "filter": {"condition": condition}}


def _inline(rows: list[list[Any]]) -> dict[str, Any]:
    return {
        "operator_id": "rows",
        "inline_source": {"columns": [{"name": "s", "data_type": "string"}], "rows": rows},
    }


def test_two_billion_partitions_are_refused_by_the_default_limits(stack: Stack) -> None:
    client, warehouse_id, _ = new_user(stack, "greedy")
    flow = workflow(_materialized([_numbers(partitions=2**31 - 1)]))
    error = refused(lambda: client.submit(warehouse_id, flow))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"workflow.operators[0].range_source.partitions"}
    assert "TEXERA_LAKE_CU_MAX_SOURCE_PARTITIONS" in (error.details() or "")
    assert unit_health(stack, _unit(stack)) == "SERVING"


OVER_LIMITS = [
    (
        "operators",
        [_numbers(), *[_filter("id > 1") | {"operator_id": f"f{i}"} for i in range(6)]],
        "workflow.operators",
        "TEXERA_LAKE_CU_MAX_OPERATORS",
    ),
    (
        "partitions",
        [_numbers(partitions=9)],
        "workflow.operators[0].range_source.partitions",
        "TEXERA_LAKE_CU_MAX_SOURCE_PARTITIONS",
    ),
    (
        "range rows",
        [_numbers(start=-(2**62), end=2**62)],
        "workflow.operators[0].range_source.end",
        "TEXERA_LAKE_CU_MAX_RANGE_ROWS",
    ),
    (
        "inline rows",
        [_inline([["a"], ["b"], ["c"], ["d"]])],
        "workflow.operators[0].inline_source.rows",
        "TEXERA_LAKE_CU_MAX_INLINE_ROWS",
    ),
    (
        "inline bytes",
        [_inline([["x" * 500]])],
        "workflow.operators[0].inline_source.rows",
        "TEXERA_LAKE_CU_MAX_INLINE_BYTES",
    ),
    (
        "expression length",
        [_numbers(), _filter(" OR ".join(["id = 1"] * 60))],
        "workflow.operators[1].filter.condition",
        "TEXERA_LAKE_CU_MAX_EXPRESSION_CHARS",
    ),
    (
        "expression depth",
        [
            _numbers(),
            {
                "operator_id": "p",
                "input_operator_ids": ["n"],
                "projection": {"columns": [{"expression": "(" * 7 + "id" + ")" * 7}]},
            },
        ],
        "workflow.operators[1].projection.columns[0].expression",
        "TEXERA_LAKE_CU_MAX_EXPRESSION_DEPTH",
    ),
    *[
        (
            name,
            [
                _numbers(),
                {"operator_id": "q", "input_operator_ids": ["n"], "sql_query": {"query": query}},
            ],
            "workflow.operators[1].sql_query.query",
            f"TEXERA_LAKE_CU_{setting}",
        )
        for name, query, setting in [
            (
                "sql range partitions",
                "SELECT * FROM range(0, 10, 1, 2147483647)",
                "MAX_SOURCE_PARTITIONS",
            ),
            (
                "sql repartition",
                "SELECT /*+ REPARTITION(100000) */ * FROM n",
                "MAX_SOURCE_PARTITIONS",
            ),
            ("sql range rows", "SELECT * FROM range(1000000000000)", "MAX_RANGE_ROWS"),
        ]
    ],
    (
        "sql depth",
        [
            _numbers(),
            {
                "operator_id": "q",
                "input_operator_ids": ["n"],
                "sql_query": {
                    "query": "SELECT CASE WHEN id > 0 THEN " * 7 + "1" + " END" * 7 + " FROM n"
                },
            },
        ],
        "workflow.operators[1].sql_query.query",
        "TEXERA_LAKE_CU_MAX_EXPRESSION_DEPTH",
    ),
]


@pytest.mark.parametrize(
    ("operators", "field", "setting"),
    [case[1:] for case in OVER_LIMITS],
    ids=[case[0] for case in OVER_LIMITS],
)
def test_a_workflow_over_a_limit_is_refused_naming_the_field_and_the_setting(
    limited: Stack, operators: list[dict[str, Any]], field: str, setting: str
) -> None:
    client, warehouse_id, _ = new_user(limited, "oversized")
    error = refused(lambda: client.submit(warehouse_id, workflow(_materialized(operators))))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {field}
    assert setting in (error.details() or "")
    assert unit_health(limited, _unit(limited)) == "SERVING"


@dataclass
class LeaseWatch:
    """Follows a unit from outside while a test runs: its heartbeats as the registry records
    them, its registration state, and its health."""

    stack: Stack
    unit: UnitHandle
    heartbeats: list[datetime] = field(default_factory=list)
    states: set[str] = field(default_factory=set)
    health: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _follow(self) -> None:
        registry = gateway_account(self.stack)
        request = registry_service_pb2.ListUnitRegistrationsRequest()
        while not self._stop.wait(0.5):
            units = registry.call(registry.leases.ListUnitRegistrations, request).registrations
            [unit] = [u for u in units if u.computing_unit_id == self.unit.unit_id]
            self.states.add(registry_service_pb2.UnitRegistrationState.Name(unit.state))
            beat = unit.last_heartbeat_time.ToDatetime()
            if not self.heartbeats or beat != self.heartbeats[-1]:
                self.heartbeats.append(beat)
            self.health.add(unit_health(self.stack, self.unit, timeout=5))

    @property
    def longest_gap(self) -> float:
        pairs = zip(self.heartbeats, self.heartbeats[1:], strict=False)
        return max((later - earlier).total_seconds() for earlier, later in pairs)

    def run(self) -> Iterator[LeaseWatch]:
        thread = threading.Thread(target=self._follow, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(30)


@pytest.fixture
def watched(limited: Stack) -> Iterator[LeaseWatch]:
    yield from LeaseWatch(limited, _unit(limited)).run()


BUSY_LOOP = udf(
    "def process(batches):\n    while True:\n        pass\n    yield from batches\n",
    [("id", "bigint")],
)
MEMORY_HOG = udf(
    "def process(batches):\n"
    "    kept = []\n"
    "    while True:\n"
    "        kept.append(bytearray(64 * 1024 * 1024))\n"
    "    yield from batches\n",
    [("id", "bigint")],
)


def _one_udf(operator_id: str, code: dict[str, Any]) -> list[dict[str, Any]]:
    """The numbers materialized (committed before the function runs), then the function."""
    return [
        _numbers(end=100, partitions=1) | {"materialize": True},
        {"operator_id": operator_id, "input_operator_ids": ["n"], "python_udf": code},
    ]


def test_runaway_executions_fail_alone_at_their_limits_while_the_unit_keeps_serving(
    limited: Stack, watched: LeaseWatch
) -> None:
    attacker, attacker_warehouse, attacker_grant = new_user(limited, "runaway")
    victim, victim_warehouse, _ = new_user(limited, "bystander")
    runaways = {
        "busy": attacker.submit(
            attacker_warehouse, workflow(_materialized(_one_udf("busy", BUSY_LOOP)))
        ),
        "hog": attacker.submit(
            attacker_warehouse, workflow(_materialized(_one_udf("hog", MEMORY_HOG)))
        ),
    }
    kept = victim.finish(
        victim.submit(victim_warehouse, filtered_numbers(3000, 2, "id % 3 = 0")).execution_id
    )
    assert state_name(kept) == "SUCCEEDED", kept.error
    assert kept.outputs[0].row_count == 1000

    ended = {name: attacker.finish(e.execution_id) for name, e in runaways.items()}
    for name, execution in ended.items():
        assert state_name(execution) == "FAILED", name
        assert execution.error.reason == "RESOURCE_LIMIT", (name, execution.error)
    busy = ended["busy"]
    assert f"{RUN_SECONDS} s" in busy.error.message
    assert "TEXERA_LAKE_CU_MAX_RUN_SECONDS" in busy.error.message
    ran = (busy.end_time.ToDatetime() - busy.start_time.ToDatetime()).total_seconds()
    assert RUN_SECONDS - 10 <= ran < RUN_SECONDS + 30  # stopped when its time was up
    assert ended["hog"].error.operator_id == "hog", ended["hog"].error
    assert "TEXERA_LAKE_CU_WORKER_MEMORY_BYTES" in ended["hog"].error.message
    # Each had committed its first output before it ran away: every result is gone.
    assert rest_catalog(limited, f"texera-{attacker_warehouse}").list_tables("results") == []
    assert not [k for k in bucket_keys(limited, attacker_grant.bucket) if "/results/" in k]

    assert watched.states == {"UNIT_REGISTRATION_STATE_HEALTHY"}
    assert watched.health == {"SERVING"}
    # Heartbeats every second (the test stack's setting); the lease lapses after six.
    assert len(watched.heartbeats) > RUN_SECONDS / 2
    assert watched.longest_gap < 3.0


BLOWUP = [
    _numbers(end=2, partitions=1) | {"materialize": True},
    {
        "operator_id": "blowup",
        "input_operator_ids": ["n"],
        "sql_query": {"query": "SELECT explode(sequence(1, 1000000000)) AS x FROM n"},
        "materialize": True,
    },
]


def test_a_query_too_big_for_the_jvm_fails_alone_and_the_jvm_lives_on(
    limited: Stack, watched: LeaseWatch
) -> None:
    attacker, attacker_warehouse, attacker_grant = new_user(limited, "blowup")
    victim, victim_warehouse, _ = new_user(limited, "survivor")
    blowup = attacker.submit(attacker_warehouse, workflow(BLOWUP))
    kept = victim.submit(victim_warehouse, filtered_numbers(30, 1, "true"))
    ended = attacker.finish(blowup.execution_id)
    assert state_name(ended) == "FAILED"
    assert ended.error.reason == "RESOURCE_LIMIT", ended.error
    assert "TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY" in ended.error.message
    assert rest_catalog(limited, f"texera-{attacker_warehouse}").list_tables("results") == []
    assert not [k for k in bucket_keys(limited, attacker_grant.bucket) if "/results/" in k]
    assert state_name(after := victim.finish(kept.execution_id)) == "SUCCEEDED", after.error
    assert watched.states == {"UNIT_REGISTRATION_STATE_HEALTHY"}
    assert watched.health == {"SERVING"}
    assert watched.longest_gap < 3.0


def test_an_execution_writing_too_much_is_stopped_and_leaves_no_result(
    limited: Stack,
) -> None:
    client, warehouse_id, grant = new_user(limited, "verbose")
    flow = workflow(
        [
            _numbers(end=10, partitions=1) | {"materialize": True},
            {"operator_id": "many", "range_source": {"end": 400_000, "partitions": 4}},
            {
                "operator_id": "hashes",
                "input_operator_ids": ["many"],
                "projection": {
                    "columns": [{"expression": "sha2(cast(id AS string), 256)", "alias": "h"}]
                },
                "materialize": True,
            },
        ]
    )
    ended = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(ended) == "FAILED"
    assert ended.error.reason == "RESOURCE_LIMIT"
    assert "TEXERA_LAKE_CU_MAX_RESULT_BYTES" in ended.error.message
    assert rest_catalog(limited, f"texera-{warehouse_id}").list_tables("results") == []
    assert not [k for k in bucket_keys(limited, grant.bucket) if "/results/" in k]


def test_user_code_runs_with_the_worker_limits(limited: Stack, tmp_path: Any) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("not for workers")
    secret.chmod(0o600)
    looks = (
        "import os, resource\n"
        "import pyarrow as pa\n"
        "def process(batches):\n"
        "    try:\n"
        f"        open({str(secret)!r}).read()\n"
        "        readable = True\n"
        "    except OSError:  # not ours to read, or covered by the sandbox\n"
        "        readable = False\n"
        "    yield pa.RecordBatch.from_pydict({\n"
        "        'uid': [os.getuid()],\n"
        "        'memory': [resource.getrlimit(resource.RLIMIT_AS)[0]],\n"
        "        'files': [resource.getrlimit(resource.RLIMIT_NOFILE)[0]],\n"
        "        'readable': [readable],\n"
        "    })\n"
    )
    client, warehouse_id, _ = new_user(limited, "sandboxed")
    flow = workflow(
        _materialized(
            [
                _numbers(end=1, partitions=1),
                {
                    "operator_id": "looks",
                    "input_operator_ids": ["n"],
                    "python_udf": udf(
                        looks,
                        [
                            ("uid", "bigint"),
                            ("memory", "bigint"),
                            ("files", "bigint"),
                            ("readable", "boolean"),
                        ],
                    ),
                },
            ]
        )
    )
    ended = client.finish(client.submit(warehouse_id, flow).execution_id)
    assert state_name(ended) == "SUCCEEDED", ended.error
    [output] = ended.outputs
    catalog = rest_catalog(limited, f"texera-{warehouse_id}")
    [seen] = catalog.load_table((output.namespace, output.table_name)).scan().to_arrow().to_pylist()
    assert seen["memory"] == WORKER_MEMORY
    assert seen["files"] == OPEN_FILES
    if os.geteuid() == 0 and closed_to_workers() is None:
        assert seen["uid"] != 0
        assert seen["readable"] is False
    else:  # another user could not read the interpreter: the workers keep the unit's user
        assert seen["uid"] == os.geteuid()


def test_a_unit_whose_lease_lapsed_stops_its_executions_and_registers_again(
    limited: Stack,
) -> None:
    """The heartbeat thread's other duty: a lease that lapsed anyway (here the whole unit was
    stopped longer than the lease) is noticed at the next heartbeat."""
    client, warehouse_id, _ = new_user(limited, "paused")
    execution = client.submit(warehouse_id, slow_workflow())
    running = client.wait_for_state(execution.execution_id, EX.EXECUTION_STATE_RUNNING)
    assert state_name(running) == "RUNNING"
    unit = _unit(limited)
    pid = unit.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(float(TEST_STACK_ENV["TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS"]) + 4)
    finally:
        os.kill(pid, signal.SIGCONT)
    ended = client.finish(execution.execution_id, timeout=120)
    assert state_name(ended) in ("FAILED", "CANCELLED")
    assert ended.error.reason in ("COMPUTING_UNIT_LOST", "CANCELLED_BY_USER")

    registry = gateway_account(limited)
    deadline = time.monotonic() + 30
    while True:
        units = registry.call(
            registry.leases.ListUnitRegistrations,
            registry_service_pb2.ListUnitRegistrationsRequest(),
        ).registrations
        [registration] = [u for u in units if u.computing_unit_id == unit.unit_id]
        if registration.state == registry_service_pb2.UNIT_REGISTRATION_STATE_HEALTHY:
            break
        assert time.monotonic() < deadline, "the unit did not register again"
        time.sleep(0.5)
    after = client.finish(client.submit(warehouse_id, filtered_numbers(30, 1, "true")).execution_id)
    assert state_name(after) == "SUCCEEDED", after.error
