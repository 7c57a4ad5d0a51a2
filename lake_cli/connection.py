"""Where the CLI calls and as whom: the gateway's address and the caller's token.

The address is --target, else TEXERA_LAKE_TARGET, else the gateway of the
embedded stack in --state-dir. Calls go over TLS: to the embedded stack
verified by its CA (stack.json names it, unless it runs plaintext); to an
address given, verified by --ca-file (TEXERA_LAKE_CA_FILE), else by the
system's roots, or in plaintext with --plaintext. The token is TEXERA_LAKE_TOKEN, never an
argument (arguments show in process lists and shell history); against the
embedded stack, --user mints a development token from the stack's secret.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from lake_client.stack_state import ENDPOINTS_FILE, JWT_SECRET_FILE
from service_runtime.auth import bearer, mint_token
from service_runtime.tls.mesh_client import MeshClientTls, blocking_mesh_channel
from texera.lake.v1 import (
    computing_unit_service_pb2_grpc,
    execution_service_pb2_grpc,
    result_service_pb2_grpc,
    retention_service_pb2_grpc,
    warehouse_service_pb2_grpc,
)

TARGET_VARIABLE = "TEXERA_LAKE_TARGET"
TOKEN_VARIABLE = "TEXERA_LAKE_TOKEN"  # noqa: S105 - the variable's name
CA_FILE_VARIABLE = "TEXERA_LAKE_CA_FILE"


class CliError(Exception):
    """A problem to report in one line, without a traceback."""


def read_state(state_dir: Path, name: str) -> str:
    try:
        return (state_dir / name).read_text()
    except FileNotFoundError as exc:
        raise CliError(
            f"no running stack found in {state_dir}: start one with `make run`, or pass --state-dir"
        ) from exc


def stack_endpoints(state_dir: Path) -> dict[str, Any]:
    endpoints: dict[str, Any] = json.loads(read_state(state_dir, ENDPOINTS_FILE))
    return endpoints


def _channel(
    target: str | None, state_dir: Path, *, ca_file: str | None = None, plaintext: bool = False
) -> grpc.Channel:
    """A channel to target, else TEXERA_LAKE_TARGET, else the embedded stack's gateway (see the
    module's docstring for its transport)."""
    if target or (target := os.environ.get(TARGET_VARIABLE)):
        if plaintext:
            return grpc.insecure_channel(target)
        ca_file = ca_file or os.environ.get(CA_FILE_VARIABLE)
        roots = _read(Path(ca_file), "the CA bundle") if ca_file else None
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(roots))
    endpoints = stack_endpoints(state_dir)
    gateway = str(endpoints["grpc"]["gateway"])
    return blocking_mesh_channel(gateway, stack_tls(endpoints))


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}") from exc


def stack_tls(endpoints: dict[str, Any], *, presenting: bool = False) -> MeshClientTls | None:
    """How to call the embedded stack whose endpoints file says endpoints: its CA (and with
    presenting, the client certificate it names, for the services that require one); None
    when it runs plaintext."""
    tls = endpoints.get("tls", {})
    if not tls.get("enabled"):
        return None
    ca = _read(Path(tls["ca"]), "the stack's CA")
    if not presenting:
        return MeshClientTls(ca_bundle=ca)
    if "client_certificate" not in tls:
        raise CliError("the stack's endpoints file names no client certificate: restart the stack")
    return MeshClientTls(
        ca_bundle=ca,
        certificate_chain=_read(Path(tls["client_certificate"]), "the stack's certificate"),
        private_key=_read(Path(tls["client_key"]), "the stack's key"),
    )


def _token(user: str | None, state_dir: Path) -> str:
    if user:
        return mint_token(read_state(state_dir, JWT_SECRET_FILE).strip(), user)
    if token := os.environ.get(TOKEN_VARIABLE):
        return token
    raise CliError(
        f"no token: set {TOKEN_VARIABLE}, or pass --user to act as a user of the embedded stack"
    )


@dataclass
class Connection:
    """Stubs of the public services at the gateway, and the caller's credentials."""

    channel: grpc.Channel
    metadata: tuple[tuple[str, str], ...]

    @classmethod
    def open(
        cls,
        target: str | None,
        user: str | None,
        state_dir: Path,
        *,
        ca_file: str | None = None,
        plaintext: bool = False,
    ) -> Connection:
        channel = _channel(target, state_dir, ca_file=ca_file, plaintext=plaintext)
        return cls(channel, (bearer(_token(user, state_dir)),))

    @property
    def warehouses(self) -> warehouse_service_pb2_grpc.WarehouseServiceStub:
        return warehouse_service_pb2_grpc.WarehouseServiceStub(self.channel)

    @property
    def units(self) -> computing_unit_service_pb2_grpc.ComputingUnitServiceStub:
        return computing_unit_service_pb2_grpc.ComputingUnitServiceStub(self.channel)

    @property
    def executions(self) -> execution_service_pb2_grpc.ExecutionServiceStub:
        return execution_service_pb2_grpc.ExecutionServiceStub(self.channel)

    @property
    def retention(self) -> retention_service_pb2_grpc.RetentionServiceStub:
        return retention_service_pb2_grpc.RetentionServiceStub(self.channel)

    @property
    def results(self) -> result_service_pb2_grpc.ResultServiceStub:
        return result_service_pb2_grpc.ResultServiceStub(self.channel)
