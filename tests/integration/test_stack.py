"""The embedded stack, driven as a person would: grpcurl, the CLI, the metrics page."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from embedded_stack.stack import Stack
from service_runtime.tls.identity import unit_server_name
from tests.integration.executions import SHARED_UNIT_OWNER
from tests.integration.mesh import BIN, grpcurl, grpcurl_transport
from tests.integration.metrics_scrape import metrics_url, scrape

pytestmark = pytest.mark.integration


#: The stack's own services, and a computing unit the registry launched.
STACK_SERVICES = {
    "gateway": {
        "texera.lake.v1.WarehouseService",
        "texera.lake.v1.ComputingUnitService",
        "texera.lake.v1.ExecutionService",
        "texera.lake.v1.ResultService",
        "texera.lake.v1.RetentionService",
        "texera.lake.v1.IcebergAccessService",  # answered by the gateway itself
    },
    "warehouse-service": {
        "texera.lake.v1.WarehouseService",
        "texera.lake.v1.ComputingUnitService",
        "texera.lake.v1.ExecutionService",  # DeleteExecution, and ended executions
        "texera.lake.v1.RetentionService",
        "texera.lake.internal.v1.ExecutionLedgerService",
        "texera.lake.internal.v1.UnitLeaseService",
        "texera.lake.internal.v1.ExecutionCredentialService",
    },
    "result-service": {"texera.lake.v1.ResultService"},
}
EXPECTED_SERVICES = {**STACK_SERVICES, "unit": {"texera.lake.v1.ExecutionService"}}
COMMON_SERVICES = {
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}


def _reach(stack: Stack, service: str) -> list[str]:
    """grpcurl's transport and target for a service: the gateway as a user reaches it; the
    services behind it and a unit as the gateway does."""
    if service == "unit":
        unit = stack.unit_for(SHARED_UNIT_OWNER)
        server_name = unit_server_name(unit.unit_id)
        return [*grpcurl_transport(stack, "gateway", server_name=server_name), unit.target]
    presenting = None if service == "gateway" else "gateway"
    return [*grpcurl_transport(stack, presenting), stack.target(service)]


@pytest.mark.parametrize("service", sorted(EXPECTED_SERVICES))
def test_reflection_lists_every_service(stack: Stack, service: str) -> None:
    listed = set(grpcurl(*_reach(stack, service), "list").stdout.split())
    assert listed == EXPECTED_SERVICES[service] | COMMON_SERVICES


@pytest.mark.parametrize("service", sorted(EXPECTED_SERVICES))
def test_health_check_answers_serving(stack: Stack, service: str) -> None:
    answer = json.loads(grpcurl(*_reach(stack, service), "grpc.health.v1.Health/Check").stdout)
    assert answer == {"status": "SERVING"}


def test_grpcurl_renders_the_details_of_every_kind_of_error(stack: Stack) -> None:
    """Through a gateway whose rate limit lets a user make a handful of calls: not found, an
    invalid argument and a refusal past the limit, each with its ErrorInfo (and RetryInfo)
    printed by grpcurl, which resolves their types through the gateway's reflection."""
    strict = stack.start_part(
        "strict-gateway",
        "gateway",
        {"TEXERA_LAKE_GATEWAY_RATE_PER_SECOND": "0.01", "TEXERA_LAKE_GATEWAY_RATE_BURST": "12"},
    )
    header = f"authorization: Bearer {stack.token(f'details-{uuid.uuid4().hex[:6]}')}"
    edge = grpcurl_transport(stack)
    method = "texera.lake.v1.WarehouseService/GetWarehouse"

    def get(warehouse_id: str) -> str:
        body = json.dumps({"warehouse_id": warehouse_id})
        return grpcurl(*edge, "-H", header, "-d", body, strict, method, check=False).stderr

    answers = {"NotFound": get(str(uuid.uuid4())), "InvalidArgument": get("not-an-id")}
    for _ in range(20):
        if "Code: ResourceExhausted" in (refused := get(str(uuid.uuid4()))):
            answers["ResourceExhausted"] = refused
            break
    assert set(answers) == {"NotFound", "InvalidArgument", "ResourceExhausted"}
    for code, printed in answers.items():
        assert f"Code: {code}" in printed
        assert "is not recognized" not in printed
        assert '"@type":"type.googleapis.com/google.rpc.ErrorInfo"' in printed
    assert '"@type":"type.googleapis.com/google.rpc.BadRequest"' in answers["InvalidArgument"]
    assert '"@type":"type.googleapis.com/google.rpc.RetryInfo"' in answers["ResourceExhausted"]


def test_describe_shows_a_method_and_its_documented_messages(stack: Stack) -> None:
    target = [*grpcurl_transport(stack), stack.target("gateway")]
    method = grpcurl(*target, "describe", "texera.lake.v1.WarehouseService.CreateWarehouse").stdout
    assert (
        "rpc CreateWarehouse ( .texera.lake.v1.CreateWarehouseRequest ) "
        "returns ( .texera.lake.v1.CreateWarehouseResponse )"
    ) in method
    assert "catalog unreachable; nothing was created" in method  # the method's comment
    credentials = grpcurl(*target, "describe", "texera.lake.v1.S3Credentials").stdout
    assert "string secret_access_key = 2 [" in credentials
    assert "(.texera.lake.v1.sensitive) = true" in credentials
    assert "// Secret access key. Required" in credentials


def test_the_gateway_describes_no_internal_service(stack: Stack) -> None:
    target = [*grpcurl_transport(stack), stack.target("gateway")]
    for internal in (
        "texera.lake.internal.v1.ExecutionLedgerService",
        "texera.lake.internal.v1.BindExecutionRequest",
    ):
        hidden = grpcurl(*target, "describe", internal, check=False)
        assert hidden.returncode != 0
        assert "not found" in hidden.stderr.lower()
    # The registry itself still describes its own API to its operators.
    registry = grpcurl(
        *_reach(stack, "warehouse-service"),
        "describe",
        "texera.lake.internal.v1.ExecutionLedgerService",
    )
    assert "rpc BindExecution" in registry.stdout


def test_calls_need_a_token_and_the_cli_mints_one(stack: Stack) -> None:
    target = [*grpcurl_transport(stack), stack.target("gateway")]
    method = "texera.lake.v1.WarehouseService/ListWarehouses"
    refused = grpcurl("-d", "{}", *target, method, check=False)
    assert "Code: Unauthenticated" in refused.stderr
    newcomer = f"newcomer-{uuid.uuid4().hex[:6]}"
    token = subprocess.run(
        [
            str(BIN / "texera-lake"),
            "--state-dir",
            str(stack.state_dir),
            "token",
            "--user",
            newcomer,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    accepted = grpcurl("-H", f"authorization: Bearer {token}", "-d", "{}", *target, method)
    assert json.loads(accepted.stdout) == {}  # a new user has no warehouse yet


def test_cli_status_reports_every_service_serving(stack: Stack) -> None:
    status = subprocess.run(
        [str(BIN / "texera-lake"), "--state-dir", str(stack.state_dir), "status"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout.count("SERVING") == len(STACK_SERVICES)


def test_every_service_exports_metrics_to_the_stacks_token_alone(stack: Stack) -> None:
    token_file = Path(stack.endpoints()["metrics_token"])
    assert token_file.stat().st_mode & 0o777 == 0o600
    for name in stack.endpoints()["metrics"]:
        assert "grpc_server_handled_total" in scrape(stack, name)
        refused = requests.get(metrics_url(stack, name), timeout=5)
        assert refused.status_code == 401, name
        assert "grpc_server" not in refused.text


def test_service_logs_are_json_lines_with_the_service_name(stack: Stack) -> None:
    grpcurl(*_reach(stack, "gateway"), "grpc.health.v1.Health/Check")
    for name in STACK_SERVICES:
        lines = (stack.log_dir / f"{name}.log").read_text().splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        assert entries
        assert all(entry["service"] == name for entry in entries)
        assert any(entry["message"] == "serving" for entry in entries)


def test_endpoints_file_describes_the_running_stack(stack: Stack) -> None:
    endpoints = json.loads((stack.state_dir / "stack.json").read_text())
    assert endpoints["grpc"]["gateway"] == stack.target("gateway")
    assert endpoints["postgres"].startswith("postgresql://postgres:***@127.0.0.1:")
    assert endpoints["s3"] == stack.s3.endpoint
