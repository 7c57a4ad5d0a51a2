"""The registry's unit port (warehouse_service.units.unit_port) and the embedded stack's TLS mode
(embedded_stack.tls): who the port takes calls from, what units are handed to verify the
registry, and the certificates and settings the stack makes."""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from embedded_stack.tls import StackTls
from service_runtime.auth import EXECUTION_ROLE, SERVICE_ROLE, UNIT_ROLE, USER_ROLE, Identity
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from service_runtime.tls.identity import service_identity
from texera.lake.internal.v1 import registry_service_pb2_grpc
from warehouse_service.settings import WarehouseServiceSettings
from warehouse_service.store.unit_launches import UnitLaunches
from warehouse_service.units.unit_port import check_registry_issued, unit_port, unit_trust

UNIT = Identity("cu-a", UNIT_ROLE, "unit-credential")
TAKEN = {
    "a unit's credential": UNIT,
    "a unit acting for a user": Identity("alice", USER_ROLE, "alice-token", via=UNIT),
    "an execution's token": Identity("execution-1", EXECUTION_ROLE, "execution-token"),
}
REFUSED = {
    "a user's token": Identity("alice", USER_ROLE, "alice-token"),
    "the gateway's own token": Identity("gateway", SERVICE_ROLE, "gateway-token"),
}


def _check(identity: Identity) -> None:
    reset = identity_var.set(identity)
    try:
        check_registry_issued("texera.lake.internal.v1.ExecutionLedgerService", Any)  # type: ignore[arg-type]
    finally:
        identity_var.reset(reset)


@pytest.mark.parametrize("identity", TAKEN.values(), ids=TAKEN.keys())
def test_the_unit_port_takes_the_registrys_own_tokens(identity: Identity) -> None:
    _check(identity)


@pytest.mark.parametrize("identity", REFUSED.values(), ids=REFUSED.keys())
def test_the_unit_port_refuses_the_gateways_tokens(identity: Identity) -> None:
    with pytest.raises(ServiceError) as raised:
        _check(identity)
    assert raised.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_the_unit_port_serves_without_client_certificates_on_its_own_port() -> None:
    settings = replace(
        WarehouseServiceSettings(),
        unit_port=50054,
        tls_require_client_certificate=True,
        tls_client_ca="/ca.pem",
        tls_allowed_peers="spiffe://texera-lake/gateway",
        metrics_port=9451,
    )
    ledger = registry_service_pb2_grpc.ExecutionLedgerServiceServicer()  # type: ignore[abstract]
    launches = UnitLaunches(db=object())  # type: ignore[arg-type]
    [port] = unit_port(settings, [ledger], object(), launches)  # type: ignore[arg-type]
    assert port.settings.port == 50054
    assert port.settings.metrics_port == 0
    assert not port.settings.tls_require_client_certificate
    assert not port.settings.allowed_peers
    unset = replace(settings, unit_port=0)
    assert unit_port(unset, [ledger], object(), launches) == []  # type: ignore[arg-type]


def test_units_are_handed_the_registrys_ca_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = replace(WarehouseServiceSettings(), tls_ca_bundle=str(bundle))
    assert unit_trust(settings) == {"TEXERA_LAKE_CU_TLS_CA_BUNDLE": bundle.read_text()}
    assert unit_trust(WarehouseServiceSettings()) == {}


def test_the_stack_issues_each_service_a_certificate_naming_it(tmp_path: Path) -> None:
    tls = StackTls(tmp_path / "tls", "127.0.0.1", ("gateway", "warehouse-service"))
    for service, files in tls.certificates.items():
        assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
        certificate = x509.load_pem_x509_certificate(files.certificate.read_bytes())
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        uris = names.value.get_values_for_type(x509.UniformResourceIdentifier)
        assert uris == [service_identity(service)]
    gateway = tls.service_settings("gateway", "GATEWAY")
    assert "TEXERA_LAKE_GATEWAY_TLS_REQUIRE_CLIENT_CERTIFICATE" not in gateway
    registry = tls.service_settings("warehouse-service", "WAREHOUSE")
    assert registry["TEXERA_LAKE_WAREHOUSE_TLS_REQUIRE_CLIENT_CERTIFICATE"] == "true"
    assert registry["TEXERA_LAKE_WAREHOUSE_TLS_CLIENT_CA_FILE"] == str(tls.ca_file)
    again = StackTls(tmp_path / "tls", "127.0.0.1", ("gateway",))  # a new start: a new CA
    assert again.ca_file.read_bytes() != b""
    assert set(again.certificates) == {"gateway"}
