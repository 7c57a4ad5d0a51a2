"""A computing unit's credential lives minutes, is renewed by the unit, moves nowhere and ends
with the unit's launch.

On a stack whose registry issues units credentials of a minute: an execution longer than that
succeeds (the unit renews its credential with every heartbeat). A copy of the unit's credential
taken meanwhile, as users' code that read the unit's memory would have it, cannot register the
unit at another address (the owner's running execution is not failed, and goes on to its
end), and is refused once the unit restarts, once it is deleted, and once it expires.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import grpc
import jwt
import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import udf, udf_workflow
from tests.integration.mesh import computing_unit, eventually, reason_of, refused, registry_as
from tests.integration.people import person
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2
from warehouse_service.store.unit_launches import GENERATION_CLAIM
from warehouse_service.units.unit_credentials import UnitCredentials

pytestmark = pytest.mark.integration
rs = registry_service_pb2
#: The units' credentials' lifetime on this test's stack (the shortest the registry takes).
CREDENTIAL_SECONDS = 60
#: The execution outlives the credential the unit was launched with.
RUN_SECONDS = CREDENTIAL_SECONDS + 15


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("unit-credentials")))
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_WAREHOUSE_UNIT_CREDENTIAL_SECONDS": str(CREDENTIAL_SECONDS),
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def heartbeat(stack: Stack, unit_id: str, credential: str) -> rs.HeartbeatComputingUnitResponse:
    unit = registry_as(stack, unit_id, credential, as_unit=True)
    beat: rs.HeartbeatComputingUnitResponse = unit.call(
        unit.leases.HeartbeatComputingUnit,
        rs.HeartbeatComputingUnitRequest(computing_unit_id=unit_id),
    )
    return beat


@pytest.mark.timeout(900)
def test_a_taken_unit_credential_moves_nothing_and_ends_with_the_launch(stack: Stack) -> None:
    alice = person(stack, "alice")
    unit_id = alice.create_unit("renewing").computing_unit_id
    sleeping = "import time\ndef process(batches):\n"
    sleeping += f"    time.sleep({RUN_SECONDS})\n    yield from batches\n"
    running = alice.executions.submit(
        alice.warehouse_id,
        udf_workflow("slow", udf(sleeping, [("id", "bigint")]), end=10),
        computing_unit_id=unit_id,
    ).execution_id
    alice.executions.wait_for_state(running, execution_pb2.EXECUTION_STATE_RUNNING)
    taken = stack.unit_credential(unit_id)  # what the unit holds now

    hijack = computing_unit(stack, unit_id)
    error = refused(
        lambda: hijack.call(
            hijack.leases.RegisterComputingUnit,
            rs.RegisterComputingUnitRequest(
                computing_unit_id=unit_id, endpoint="127.0.0.1:9", capacity=1
            ),
        )
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason_of(error)[0] == "UNIT_ENDPOINT_NOT_LAUNCHED"

    ended = alice.executions.finish(running, timeout=600)
    assert ended.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, ended.error
    assert ended.end_time.ToSeconds() - ended.start_time.ToSeconds() > CREDENTIAL_SECONDS
    assert len(alice.results.rows(running, "slow")) == 10

    # The registry hands the unit a fresh credential with each heartbeat, of the same launch.
    assert heartbeat(stack, unit_id, taken).credential not in ("", taken)

    killed = stack.unit_for(alice.user_id, unit_id).pid
    os.kill(killed, signal.SIGKILL)
    # The registry sees the unit's process gone, then the next acquire launches it again.
    eventually(lambda: stack.unit_for(alice.user_id, unit_id).pid != killed, "a new launch")
    error = refused(lambda: heartbeat(stack, unit_id, taken))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(error)[0] == "UNIT_CREDENTIAL_REVOKED"

    expiring = short_lived(stack, unit_id)
    time.sleep(3)
    assert refused(lambda: heartbeat(stack, unit_id, expiring)).code() == (
        grpc.StatusCode.UNAUTHENTICATED
    )

    current = stack.unit_credential(unit_id)
    assert heartbeat(stack, unit_id, current).credential
    alice.delete(unit_id, force=True)
    error = refused(lambda: heartbeat(stack, unit_id, current))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(error)[0] == "UNIT_CREDENTIAL_REVOKED"


def short_lived(stack: Stack, unit_id: str) -> str:
    """A credential of the unit's current launch that lives two seconds."""
    current = jwt.decode(stack.unit_credential(unit_id), options={"verify_signature": False})
    generation = str(current[GENERATION_CLAIM])
    return UnitCredentials(stack.secrets.registry_key, ttl_seconds=2).issue(
        unit_id, "stack", generation
    )
