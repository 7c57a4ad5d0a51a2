"""The whole mesh on one machine: PostgreSQL, an S3 endpoint and the four services.

Stack.start() brings the parts up in dependency order and waits until each is
healthy; Stack.stop() takes them down in reverse. The endpoints are written to
``<state dir>/stack.json`` for the CLI and tests; the JWT secret the services
share is generated once into ``<state dir>/jwt-secret`` (mode 0600) and never
printed.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cu_service.settings import ComputingUnitSettings
from embedded_stack.postgres import EmbeddedPostgres
from embedded_stack.processes import ManagedProcess, ProcessFailed, wait_until
from embedded_stack.s3 import MotoS3
from embedded_stack.settings import StackSettings
from gateway.settings import GatewaySettings
from result_service.settings import ResultServiceSettings
from service_runtime.auth import mint_token
from service_runtime.config import ENV_PREFIX, ServerSettings
from service_runtime.health_probe import probe
from warehouse_service.settings import WarehouseServiceSettings

ENDPOINTS_FILE = "stack.json"
SECRET_FILE = "jwt-secret"  # noqa: S105 - a file name, not a secret


@dataclass(frozen=True)
class ServiceSpec:
    """A service of the mesh as the stack runs it."""

    name: str
    module: str
    settings: type[ServerSettings]


#: In start order: each service starts after those it calls.
SERVICES = (
    ServiceSpec("warehouse-service", "warehouse_service", WarehouseServiceSettings),
    ServiceSpec("result-service", "result_service", ResultServiceSettings),
    ServiceSpec("cu-service", "cu_service", ComputingUnitSettings),
    ServiceSpec("gateway", "gateway", GatewaySettings),
)


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class Ports:
    """Every port the stack listens on, by part name."""

    grpc: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)
    postgres: int = 0
    s3: int = 0

    @classmethod
    def choose(cls, settings: StackSettings, environ: dict[str, str], *, ephemeral: bool) -> Ports:
        """The configured ports, or free ones picked now when ephemeral."""
        host = settings.host
        ports = cls()
        for spec in SERVICES:
            configured = spec.settings.from_env(environ)
            ports.grpc[spec.name] = free_port(host) if ephemeral else configured.port
            ports.metrics[spec.name] = free_port(host) if ephemeral else configured.metrics_port
        ports.postgres = free_port(host) if ephemeral else settings.postgres_port
        ports.s3 = free_port(host) if ephemeral else settings.s3_port
        return ports

    def check_free(self, host: str, *, with_postgres: bool) -> None:
        named = [(f"{n} gRPC", p) for n, p in self.grpc.items()] + [
            (f"{n} metrics", p) for n, p in self.metrics.items() if p
        ]
        named.append(("S3 endpoint", self.s3))
        if with_postgres:
            named.append(("PostgreSQL", self.postgres))
        busy = [f"{what} port {port}" for what, port in named if _port_in_use(host, port)]
        if busy:
            raise ProcessFailed(
                "already in use: "
                + ", ".join(busy)
                + f"; stop what uses them or set the {ENV_PREFIX}*_PORT settings"
            )


class Stack:
    """The embedded mesh. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        settings: StackSettings | None = None,
        *,
        ephemeral_ports: bool = False,
        service_env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings or StackSettings.from_env()
        self.state_dir = Path(self.settings.state_dir).resolve()
        self._environ = {**os.environ, **(service_env or {})}
        self.ports = Ports.choose(self.settings, self._environ, ephemeral=ephemeral_ports)
        self.jwt_secret = self._load_or_create_secret()
        self.postgres: EmbeddedPostgres | None = None
        self.s3 = MotoS3(self.settings.host, self.ports.s3, self.log_dir / "s3.log")
        self._processes: list[ManagedProcess] = []

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def database_url(self) -> str:
        if self.settings.postgres_dsn:
            return self.settings.postgres_dsn
        assert self.postgres is not None
        return self.postgres.dsn(self.settings.database)

    def target(self, service: str) -> str:
        return f"{self.settings.host}:{self.ports.grpc[service]}"

    def token(self, user_id: str, *, ttl_seconds: float = 3600.0) -> str:
        """A token for user_id signed with the stack's secret."""
        return mint_token(self.jwt_secret, user_id, ttl_seconds=ttl_seconds)

    def _load_or_create_secret(self) -> str:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / SECRET_FILE
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(48))
        return path.read_text().strip()

    def start(self) -> None:
        host = self.settings.host
        embedded_postgres = not self.settings.postgres_dsn
        self.ports.check_free(host, with_postgres=embedded_postgres)
        try:
            if embedded_postgres:
                self.postgres = EmbeddedPostgres(
                    self.state_dir / "postgres",
                    host,
                    self.ports.postgres,
                    self.log_dir / "postgres.log",
                )
                self._processes.append(self.postgres.start())
                self.postgres.create_database(self.settings.database)
            self._processes.append(self.s3.start())
            for spec in SERVICES:
                self._processes.append(self._start_service(spec))
        except BaseException:
            self.stop()
            raise
        self._write_endpoints()

    def _service_env(self) -> dict[str, str]:
        env = {
            **self._environ,
            "PYTHONUNBUFFERED": "1",
            f"{ENV_PREFIX}HOST": self.settings.host,
            f"{ENV_PREFIX}JWT_SECRET": self.jwt_secret,
            f"{ENV_PREFIX}LOG_LEVEL": self.settings.log_level,
        }
        for spec in SERVICES:
            scope = spec.settings.scope
            env[f"{ENV_PREFIX}{scope}_PORT"] = str(self.ports.grpc[spec.name])
            env[f"{ENV_PREFIX}{scope}_METRICS_PORT"] = str(self.ports.metrics[spec.name])
        return env

    def _start_service(self, spec: ServiceSpec, timeout: float = 60.0) -> ManagedProcess:
        process = ManagedProcess(
            spec.name,
            [sys.executable, "-m", spec.module],
            self.log_dir / f"{spec.name}.log",
            env=self._service_env(),
        )
        target = self.target(spec.name)
        wait_until(lambda: probe(target) == "SERVING", process, timeout, spec.name)
        return process

    def check_running(self) -> None:
        """Raises ProcessFailed if any part has exited."""
        for process in self._processes:
            process.check_running()

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        (self.state_dir / ENDPOINTS_FILE).unlink(missing_ok=True)

    def endpoints(self) -> dict[str, Any]:
        return {
            "grpc": {spec.name: self.target(spec.name) for spec in SERVICES},
            "metrics": {
                spec.name: f"http://{self.settings.host}:{port}/metrics"
                for spec in SERVICES
                if (port := self.ports.metrics[spec.name])
            },
            "postgres": _without_password(self.database_url),
            "s3": self.s3.endpoint,
            "logs": str(self.log_dir),
        }

    def _write_endpoints(self) -> None:
        path = self.state_dir / ENDPOINTS_FILE
        path.write_text(json.dumps(self.endpoints(), indent=2) + "\n")

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _without_password(dsn: str) -> str:
    """The DSN as it can be shown: any password replaced by ***."""
    scheme, sep, rest = dsn.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return dsn
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}"
