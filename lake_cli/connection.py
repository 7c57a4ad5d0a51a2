"""Where the CLI calls and as whom: the gateway's address and the caller's token.

The address is --target, else TEXERA_LAKE_TARGET, else the gateway of the
embedded stack in --state-dir. The token is TEXERA_LAKE_TOKEN, never an
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

from embedded_stack.secrets import JWT_SECRET_FILE
from embedded_stack.state_files import ENDPOINTS_FILE
from service_runtime.auth import bearer, mint_token
from texera.lake.v1 import (
    computing_unit_service_pb2_grpc,
    execution_service_pb2_grpc,
    result_service_pb2_grpc,
    retention_service_pb2_grpc,
    warehouse_service_pb2_grpc,
)

TARGET_VARIABLE = "TEXERA_LAKE_TARGET"
TOKEN_VARIABLE = "TEXERA_LAKE_TOKEN"  # noqa: S105 - the variable's name


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


def _channel(target: str | None, state_dir: Path) -> grpc.Channel:
    """A channel to target, else TEXERA_LAKE_TARGET (both plaintext), else the embedded
    stack's gateway: over TLS verified by the stack's CA when the stack runs in TLS mode."""
    if target or (target := os.environ.get(TARGET_VARIABLE)):
        return grpc.insecure_channel(target)
    endpoints = stack_endpoints(state_dir)
    gateway = str(endpoints["grpc"]["gateway"])
    tls = endpoints.get("tls", {})
    if not tls.get("enabled"):
        return grpc.insecure_channel(gateway)
    authority = grpc.ssl_channel_credentials(Path(tls["ca"]).read_bytes())
    return grpc.secure_channel(gateway, authority)


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
    def open(cls, target: str | None, user: str | None, state_dir: Path) -> Connection:
        channel = _channel(target, state_dir)
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
