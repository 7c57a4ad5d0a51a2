"""The embedded stack in TLS mode, with real processes: the gateway serves TLS, the registry and
the result service mutual TLS with their caller rules, and the services call each other over
mutual TLS, and computing units serve mutual TLS with certificates the registry issued at
their launch. A user's workflow runs through the gateway over TLS, long enough that its Spark
tasks renew their storage credentials at the registry's unit port (three-second credentials,
a commit after every wave of tasks); another outlives its unit's certificate and credential
(one minute each), renewed in the unit's heartbeats; what is not the mesh's is refused.
"""

from __future__ import annotations

import datetime
import json
import stat
import subprocess
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from cryptography import x509

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack, UnitHandle
from lake_client.stack_state import ENDPOINTS_FILE
from service_runtime.health_probe import probe
from service_runtime.tls.authority import SERVICE_LIFETIME, MeshAuthority
from service_runtime.tls.identity import (
    GATEWAY,
    service_identity,
    unit_identity,
    unit_server_name,
)
from service_runtime.tls.mesh_client import MeshClientTls, blocking_mesh_channel
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import sleeping_udf, workflow
from tests.integration.mesh import BIN, bad_fields, bearer, reason, refused
from tests.integration.people import person
from tests.unit.tls_files import CertificatePaths, served_certificate
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from texera.lake.v1 import (
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
    warehouse_service_pb2,
    warehouse_service_pb2_grpc,
)

pytestmark = pytest.mark.integration

ROWS = 4000
UNIT_CERTIFICATE_SECONDS = 60


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("tls")), tls=True)
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_DEV_CATALOG_CREDENTIAL_LIFETIME_SECONDS": "3",
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",  # a commit after every wave of tasks
        # The shortest lives the registry allows: executions below outlive them.
        "TEXERA_LAKE_WAREHOUSE_UNIT_CERTIFICATE_SECONDS": str(UNIT_CERTIFICATE_SECONDS),
        "TEXERA_LAKE_WAREHOUSE_UNIT_CREDENTIAL_SECONDS": str(UNIT_CERTIFICATE_SECONDS),
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _renewals(stack: Stack) -> int:
    """Credentials the registry vended to tasks (on its unit port, in its log)."""
    lines = (stack.log_dir / "warehouse-service.log").read_text().splitlines()
    return sum(1 for line in lines if "/VendTableCredentials" in line and '"code": "OK"' in line)


def test_the_endpoints_file_names_the_ca_and_keys_are_private(tls_stack: Stack) -> None:
    endpoints = json.loads((tls_stack.state_dir / ENDPOINTS_FILE).read_text())
    assert endpoints["tls"]["enabled"] is True
    assert endpoints["tls"]["ca"] == str(tls_stack.state_dir / "tls" / "ca.pem")
    assert tls_stack.tls is not None
    for files in tls_stack.tls.certificates.values():
        assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
        assert b"PRIVATE KEY" not in files.certificate.read_bytes()


def test_a_workflow_through_the_gateway_over_tls_renews_its_credentials(
    tls_stack: Stack,
) -> None:
    alice = person(tls_stack, "tls-alice")  # every call below through the gateway, over TLS
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": ROWS, "partitions": 12}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": sleeping_udf(1.5),
                "materialize": True,
            },
        ]
    )
    renewed_before = _renewals(tls_stack)
    submitted = alice.executions.submit(alice.warehouse_id, flow)
    execution = alice.executions.finish(submitted.execution_id)
    assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, execution.error
    [output] = execution.outputs
    assert output.row_count == ROWS
    assert execution.progress.commits >= 2
    page = alice.results.page(execution.execution_id, "slow", page_size=10)
    assert len(page.rows) == 10
    rows, _ = alice.results.all_rows(execution.execution_id, "slow", page_size=1000)
    assert sorted(int(row["id"]) for row in rows) == list(range(ROWS))
    assert _renewals(tls_stack) > renewed_before  # tasks renewed at the unit port


def test_plaintext_to_the_gateways_tls_port_is_refused(tls_stack: Stack) -> None:
    assert probe(tls_stack.target("gateway"), tls=tls_stack.client_tls(None)) == "SERVING"
    assert probe(tls_stack.target("gateway"), timeout=10) == "UNREACHABLE (UNAVAILABLE)"


def test_the_registry_refuses_a_client_without_a_certificate_of_the_mesh(
    tls_stack: Stack,
) -> None:
    assert tls_stack.tls is not None
    impostor = MeshAuthority.create().issue(service_identity(GATEWAY), lifetime=SERVICE_LIFETIME)
    outsider = MeshClientTls(
        ca_bundle=tls_stack.tls.ca_file.read_bytes(),
        certificate_chain=impostor.certificate_pem,
        private_key=impostor.private_key_pem,
    )
    registry = tls_stack.target("warehouse-service")
    assert probe(registry, tls=tls_stack.client_tls()) == "SERVING"  # the gateway's: taken
    # Another CA's certificate naming the gateway, or none: refused in the handshake.
    assert probe(registry, tls=outsider, timeout=10) == "UNREACHABLE (UNAVAILABLE)"
    assert probe(registry, tls=tls_stack.client_tls(None), timeout=10) == (
        "UNREACHABLE (UNAVAILABLE)"
    )


def test_the_result_services_certificate_may_not_call_what_only_the_gateway_may(
    tls_stack: Stack,
) -> None:
    user_token = bearer(tls_stack.internal_token("tls-mallory"))
    request = warehouse_service_pb2.ListWarehousesRequest()
    with tls_stack.channel("warehouse-service", presenting="result-service") as channel:
        stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
        error = refused(lambda: stub.ListWarehouses(request, metadata=user_token, timeout=30))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(error) == "PEER_NOT_ALLOWED"
    with tls_stack.channel("warehouse-service") as channel:  # the gateway's: taken
        stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
        stub.ListWarehouses(request, metadata=user_token, timeout=30)


def test_the_unit_port_takes_only_the_registrys_own_tokens(tls_stack: Stack) -> None:
    """Without a client certificate, a user's token (the gateway's to give) gets nothing."""
    tls = tls_stack.client_tls(None)
    with blocking_mesh_channel(tls_stack.registry_unit_target, tls) as channel:
        stub = registry_service_pb2_grpc.UnitLeaseServiceStub(channel)
        error = refused(
            lambda: stub.AcquireComputingUnit(
                registry_service_pb2.AcquireComputingUnitRequest(),
                metadata=bearer(tls_stack.internal_token("tls-mallory")),
                timeout=30,
            )
        )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(error) == "PEER_NOT_ALLOWED"


def test_grpcurl_lists_the_gateways_services_with_the_stacks_ca(tls_stack: Stack) -> None:
    assert tls_stack.tls is not None
    listed = subprocess.run(
        [
            str(BIN / "grpcurl"),
            "-cacert",
            str(tls_stack.tls.ca_file),
            tls_stack.target("gateway"),
            "list",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    assert "texera.lake.v1.ExecutionService" in listed
    assert "texera.lake.v1.WarehouseService" in listed


def _served_to_the_gateway(stack: Stack, unit: UnitHandle) -> x509.Certificate:
    """The certificate a new connection to the unit is served, as the gateway connects."""
    assert stack.tls is not None
    gateway = stack.tls.certificates["gateway"]
    host, port = unit.target.rsplit(":", 1)
    return served_certificate(
        int(port),
        stack.tls.ca_file,
        server_name=unit_server_name(unit.unit_id),
        client=CertificatePaths(gateway.certificate, gateway.key),
        host=host,
    )


def test_a_unit_serves_mutual_tls_taking_users_calls_from_the_gateway_alone(
    tls_stack: Stack,
) -> None:
    alice = person(tls_stack, "tls-unit")
    unit = tls_stack.unit_for(alice.user_id)
    certificate = _served_to_the_gateway(tls_stack, unit)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        unit_identity(unit.unit_id)
    ]
    assert names.get_values_for_type(x509.IPAddress) == []
    life = certificate.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert life <= datetime.timedelta(seconds=UNIT_CERTIFICATE_SECONDS)
    assert probe(unit.target, timeout=10) == "UNREACHABLE (UNAVAILABLE)"  # plaintext
    request = execution_service_pb2.GetExecutionRequest(execution_id="no-such-execution")
    metadata = tls_stack.unit_call_metadata(alice.user_id, unit.unit_id)
    with tls_stack.unit_channel(unit) as channel:  # as the gateway: heard, and not found
        stub = execution_service_pb2_grpc.ExecutionServiceStub(channel)
        error = refused(lambda: stub.GetExecution(request, metadata=metadata, timeout=30))
        assert error.code() == grpc.StatusCode.NOT_FOUND
    as_result_service = blocking_mesh_channel(
        unit.target,
        tls_stack.client_tls("result-service"),
        server_name=unit_server_name(unit.unit_id),
    )
    with as_result_service as channel:
        stub = execution_service_pb2_grpc.ExecutionServiceStub(channel)
        error = refused(lambda: stub.GetExecution(request, metadata=metadata, timeout=30))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(error) == "PEER_NOT_ALLOWED"
    # The gateway meaning another unit at this address: refused in the handshake.
    another = blocking_mesh_channel(
        unit.target, tls_stack.client_tls(), server_name=unit_server_name("cu-another")
    )
    with another as channel:
        stub = execution_service_pb2_grpc.ExecutionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as handshake:
            stub.GetExecution(request, metadata=metadata, timeout=10)
    assert handshake.value.code() == grpc.StatusCode.UNAVAILABLE


def test_an_execution_outlives_its_units_certificate_and_credential(tls_stack: Stack) -> None:
    bob = person(tls_stack, "tls-long")
    unit = tls_stack.unit_for(bob.user_id)
    first = _served_to_the_gateway(tls_stack, unit)
    seconds = UNIT_CERTIFICATE_SECONDS + 10
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 10, "partitions": 1}},
            {
                "operator_id": "slow",
                "input_operator_ids": ["n"],
                "python_udf": sleeping_udf(seconds),
                "materialize": True,
            },
        ]
    )
    submitted = bob.executions.submit(bob.warehouse_id, flow, computing_unit_id=unit.unit_id)
    execution = bob.executions.finish(submitted.execution_id, timeout=seconds + 120)
    assert execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, execution.error
    assert execution.outputs[0].row_count == 10
    now = datetime.datetime.now(datetime.UTC)
    assert first.not_valid_after_utc < now  # the unit's first certificate is over
    renewed = _served_to_the_gateway(tls_stack, unit)  # a new handshake: taken
    assert renewed.public_key() == first.public_key()  # renewed for the key it kept
    assert renewed.not_valid_before_utc <= now < renewed.not_valid_after_utc
    page = bob.results.page(execution.execution_id, "slow", page_size=10)
    assert len(page.rows) == 10


def test_the_gateways_certificate_rotates_while_clients_call_with_no_failed_call(
    tls_stack: Stack,
) -> None:
    """The gateway process reads its rotated files before its next handshake; calls over a
    connection opened before, and over new connections, all succeed throughout."""
    assert tls_stack.tls is not None
    ca_file = tls_stack.tls.ca_file
    port = int(tls_stack.target("gateway").rsplit(":", 1)[1])
    metadata = bearer(tls_stack.token("tls-rotation"))
    request = warehouse_service_pb2.ListWarehousesRequest()
    stop = threading.Event()
    failures: list[grpc.RpcError] = []
    calls = {"kept open": 0, "new connections": 0}

    def call_until_stopped(kind: str) -> None:
        kept = tls_stack.channel("gateway", presenting=None)
        while not stop.is_set():
            channel = kept if kind == "kept open" else tls_stack.channel("gateway", presenting=None)
            try:
                warehouse_service_pb2_grpc.WarehouseServiceStub(channel).ListWarehouses(
                    request, metadata=metadata, timeout=30
                )
                calls[kind] += 1
            except grpc.RpcError as error:
                failures.append(error)
            finally:
                if channel is not kept:
                    channel.close()
            time.sleep(0.02)  # within the gateway's rate limit for one user
        kept.close()

    before = served_certificate(port, ca_file).serial_number
    callers = [threading.Thread(target=call_until_stopped, args=(kind,)) for kind in calls]
    for caller in callers:
        caller.start()
    try:
        time.sleep(1)
        rotated = tls_stack.tls.rotate("gateway")
        deadline = time.monotonic() + 30
        while (served := served_certificate(port, ca_file).serial_number) != rotated:
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.1)
        time.sleep(1)  # calls go on over the old connection and new ones
    finally:
        stop.set()
        for caller in callers:
            caller.join(60)
    assert before != served
    assert failures == []
    assert calls["kept open"] > 5
    assert calls["new connections"] > 5


def test_a_heartbeats_malformed_signing_request_is_invalid_argument_naming_it(
    tls_stack: Stack,
) -> None:
    unit = tls_stack.unit_for(person(tls_stack, "tls-csr").user_id)
    request = registry_service_pb2.HeartbeatComputingUnitRequest(
        computing_unit_id=unit.unit_id, certificate_signing_request=b"not a request"
    )
    with tls_stack.registry_unit_channel() as channel:
        stub = registry_service_pb2_grpc.UnitLeaseServiceStub(channel)
        metadata = bearer(tls_stack.unit_credential(unit.unit_id))
        error = refused(lambda: stub.HeartbeatComputingUnit(request, metadata=metadata, timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"certificate_signing_request"}
