"""The whole mesh on one machine: PostgreSQL, an S3 endpoint, the development catalog and
the services; the registry launches users' computing units on demand.

Stack.start() brings the parts up in dependency order and waits until each is
healthy; Stack.stop() takes them down in reverse. Each start is fresh: the S3
endpoint keeps its data in memory, so the embedded PostgreSQL's data is reset
too, keeping the two consistent. The endpoints are written to
``<state dir>/stack.json`` for the CLI and tests. Secrets the parts share (the
JWT secret, the catalog's encryption key, the signing keys) are generated into
files of mode 0600 in the state dir and never printed; each part gets only its
own, in files (see embedded_stack.secrets). The S3 endpoint's administrator key is there too
while the stack runs, for `texera-lake dev user`, and the bearer token of the services'
/metrics, made at each start (its path in stack.json). The registry is the development
catalog's one OAuth2 client and bootstraps the catalog, which makes it the
catalog's admin.
The state dir is the stack's user's alone (run as root: and the embedded
PostgreSQL's system user's group, which needs to reach its data), so that
computing units, running as users of their own, cannot read it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from embedded_stack.dev_catalog.settings import DevCatalogSettings
from embedded_stack.postgres import EmbeddedPostgres, ensure_database, ensure_owned_database
from embedded_stack.s3.endpoint import BucketGrant, S3Endpoint
from embedded_stack.secrets import StackSecrets
from embedded_stack.settings import StackSettings
from embedded_stack.tls import TLS_FOLDER, StackTls
from gateway.settings import GatewaySettings
from lake_client.stack_state import ENDPOINTS_FILE, S3_ADMIN_KEY_FILE
from result_service.settings import ResultServiceSettings
from service_runtime.auth import ON_BEHALF_KEY, SERVICE_ROLE, USER_ROLE, bearer, mint_token
from service_runtime.config import ENV_PREFIX, ServerSettings
from service_runtime.health_probe import probe
from service_runtime.internal_tokens import (
    GATEWAY_ISSUER,
    GATEWAY_SUBJECT,
    MESH_AUDIENCE,
    TokenSigner,
    unit_audience,
)
from service_runtime.ports import free_port, port_in_use
from service_runtime.processes import (
    ManagedProcess,
    ProcessFailed,
    let_others_traverse,
    wait_until,
)
from service_runtime.tls.identity import unit_server_name
from service_runtime.tls.mesh_client import MeshClientTls, blocking_mesh_channel
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.settings import WarehouseServiceSettings
from warehouse_service.units.unit_credentials import UnitCredentials

#: The registry's client id at the development catalog.
CATALOG_CLIENT_ID = "texera-lake-registry"
#: The registry's reader client there, which it grants reading each warehouse.
CATALOG_READER_ID = "texera-lake-reader"
#: global-sql: the SQL catalog's database, and its own login role.
SQL_CATALOG_DATABASE = "texera_lake_iceberg"
MODE_SETTING = f"{ENV_PREFIX}CATALOG_MODE"

log = logging.getLogger(__name__)


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
    ServiceSpec("gateway", "gateway", GatewaySettings),
)


@dataclass
class Ports:
    """Every port the stack listens on."""

    grpc: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)
    postgres: int = 0
    s3: int = 0
    catalog: int = 0
    #: The gateway's Iceberg REST catalog for users.
    iceberg: int = 0
    #: TLS mode: the registry's unit port (0 without TLS).
    registry_units: int = 0
    #: The registry's catalog gatekeeper, for units.
    gatekeeper: int = 0
    #: TLS mode: the unit ports of registries start_part started, by part.
    part_unit_ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def choose(cls, settings: StackSettings, environ: dict[str, str], *, ephemeral: bool) -> Ports:
        """The configured ports, or free ones picked now when ephemeral."""

        def pick(configured: int) -> int:
            return free_port(settings.host) if ephemeral else configured

        ports = cls(
            postgres=pick(settings.postgres_port),
            s3=pick(settings.s3_port),
            catalog=pick(DevCatalogSettings.from_env(environ).port),
            iceberg=pick(settings.iceberg_port),
            gatekeeper=pick(settings.gatekeeper_port),
            registry_units=pick(settings.registry_unit_port) if settings.tls else 0,
        )
        for spec in SERVICES:
            configured = spec.settings.from_env(environ)
            ports.grpc[spec.name] = pick(configured.port)
            ports.metrics[spec.name] = (
                pick(configured.metrics_port) if configured.metrics_port else 0
            )
        return ports

    def check_free(self, host: str, *, with_postgres: bool) -> None:
        named = [(f"{n} gRPC", p) for n, p in self.grpc.items()]
        named += [(f"{n} metrics", p) for n, p in self.metrics.items() if p]
        named += [("S3 endpoint", self.s3), ("catalog", self.catalog)]
        named.append(("Iceberg REST", self.iceberg))
        named.append(("catalog gatekeeper", self.gatekeeper))
        if self.registry_units:
            named.append(("registry unit", self.registry_units))
        if with_postgres:
            named.append(("PostgreSQL", self.postgres))
        busy = [f"{what} port {port}" for what, port in named if port_in_use(host, port)]
        if busy:
            raise ProcessFailed(
                f"already in use: {', '.join(busy)}; "
                f"stop what uses them or set the {ENV_PREFIX}*_PORT settings"
            )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback http
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class UnitHandle:
    """A running computing unit of a user."""

    unit_id: str
    #: host:port of its ExecutionService.
    target: str
    pid: int


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
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        self._environ = {**os.environ, **(service_env or {})}
        self.ports = Ports.choose(self.settings, self._environ, ephemeral=ephemeral_ports)
        self.secrets = StackSecrets(self.state_dir)
        self.jwt_secret = self.secrets.jwt_secret
        host = self.settings.host
        self.postgres = EmbeddedPostgres(
            self.state_dir / "postgres",
            host,
            self.ports.postgres,
            self.log_dir / "postgres.log",
            password=self.secrets.database_password,
        )
        #: Where the registry keeps its units' homes and logs: outside the state dir, which
        #: units may not enter. Short: a unit's UNIX sockets live below it, and a socket's
        #: path may not exceed 107 bytes.
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]
        self.unit_root = Path(tempfile.gettempdir(), f"tlu-{digest}")
        self.s3 = S3Endpoint(host, self.ports.s3, self.log_dir, self.state_dir / S3_ADMIN_KEY_FILE)
        self.database_url = ""
        self.catalog_database_url = ""
        #: global modes: the platform warehouse's bucket; global-sql: its catalog database.
        self.platform_bucket: BucketGrant | None = None
        self.sql_catalog_url = ""
        self._processes: list[ManagedProcess] = []
        #: TLS mode: the CA and the services' certificates, made at start.
        self.tls: StackTls | None = None

    @property
    def catalog_mode(self) -> CatalogMode:
        """The mesh's catalog mode, as the services' TEXERA_LAKE_CATALOG_MODE sets it."""
        return CatalogMode(self._environ.get(MODE_SETTING) or CatalogMode.PER_USER.value)

    @property
    def catalog_key(self) -> str:
        """The development catalog's encryption key (tests search for it where it must not
        be)."""
        return self.secrets.catalog_key

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def catalog_url(self) -> str:
        """Base URL of the development catalog (Lakekeeper's layout)."""
        return f"http://{self.settings.host}:{self.ports.catalog}"

    @property
    def secrets_dir(self) -> Path:
        """The folder of each part's secret files."""
        return self.secrets.folder

    def catalog_token(self, catalog_url: str | None = None) -> str:
        """An access token of the registry's catalog client (the catalog's admin)."""
        request = urllib.request.Request(  # noqa: S310 - loopback http
            f"{catalog_url or self.catalog_url}/oauth2/token",
            data=urllib.parse.urlencode(
                {
                    "grant_type": "client_credentials",
                    "client_id": CATALOG_CLIENT_ID,
                    "client_secret": self.secrets.catalog_client_secret,
                }
            ).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return str(json.load(response)["access_token"])

    def target(self, service: str) -> str:
        return f"{self.settings.host}:{self.ports.grpc[service]}"

    def client_tls(self, presenting: str | None = "gateway") -> MeshClientTls | None:
        """TLS mode: the stack's CA, and the certificate of service presenting (the gateway's
        unless said: the stack calls behind the gateway as the gateway; None presents none);
        None without TLS."""
        return None if self.tls is None else self.tls.client(presenting)

    def channel(
        self,
        part: str,
        *,
        presenting: str | None = "gateway",
        options: Sequence[tuple[str, Any]] = (),
    ) -> grpc.Channel:
        """A blocking channel to a part (a service's name) with gRPC's channel options: TLS in
        TLS mode, verifying the stack's CA and presenting presenting's certificate (see
        client_tls); plaintext else."""
        return blocking_mesh_channel(
            self.target(part), self.client_tls(presenting), options=options
        )

    def registry_unit_channel(self, part: str = "warehouse-service") -> grpc.Channel:
        """A blocking channel to a registry (part) as a computing unit or an execution's Spark
        task opens it: in TLS mode to its unit port, verifying the stack's CA and presenting
        no certificate; plaintext to its one port else."""
        if self.tls is None:
            return self.channel(part)
        if part == "warehouse-service":
            target = self.registry_unit_target
        else:
            target = f"{self.settings.host}:{self.ports.part_unit_ports[part]}"
        return blocking_mesh_channel(target, self.client_tls(None))

    def unit_channel(self, unit: UnitHandle) -> grpc.Channel:
        """A blocking channel to a computing unit as the gateway opens it: in TLS mode,
        verifying the unit's certificate by its name and presenting the gateway's."""
        return blocking_mesh_channel(
            unit.target, self.client_tls(), server_name=unit_server_name(unit.unit_id)
        )

    def token(self, user_id: str, *, ttl_seconds: float = 3600.0) -> str:
        """A Texera token for user_id signed with the stack's secret, for the gateway."""
        return mint_token(self.jwt_secret, user_id, ttl_seconds=ttl_seconds)

    def internal_token(
        self, subject: str, audience: str = MESH_AUDIENCE, role: str = USER_ROLE
    ) -> str:
        """An internal token as the gateway mints it, for calling a service behind the gateway
        directly (audience: ``mesh``, or a unit's)."""
        signer = TokenSigner(self.secrets.gateway_key, GATEWAY_ISSUER)
        return signer.mint(subject, role, audience, ttl_seconds=3600)

    def service_token(self, service: str) -> str:
        """The gateway's token for its own account (a SERVICE)."""
        return self.internal_token(service, role=SERVICE_ROLE)

    def token_for(self, part: str, user_id: str) -> str:
        """The token user_id presents when calling part directly: a Texera token at the
        gateway, an internal token for the mesh behind it."""
        return self.token(user_id) if part == "gateway" else self.internal_token(user_id)

    def unit_token(self, user_id: str, unit_id: str) -> str:
        """A user's internal token for computing unit unit_id."""
        return self.internal_token(user_id, unit_audience(unit_id))

    def unit_call_metadata(self, user_id: str, unit_id: str) -> tuple[tuple[str, str], ...]:
        """What the gateway sends with user_id's call to computing unit unit_id: its own token
        for the unit, and the user's."""
        gateway = self.internal_token(GATEWAY_SUBJECT, unit_audience(unit_id), SERVICE_ROLE)
        return (bearer(gateway), (ON_BEHALF_KEY, self.unit_token(user_id, unit_id)))

    def unit_credential(self, unit_id: str) -> str:
        """The credential the registry would issue to computing unit unit_id now: of its
        current launch, as its row says (a unit without one gets a credential the registry
        refuses)."""

        async def generation() -> str:
            connection = await asyncpg.connect(self.database_url)
            try:
                current = await connection.fetchval(
                    "SELECT credential_generation FROM units WHERE unit_id = $1", unit_id
                )
            finally:
                await connection.close()
            return str(current or "")

        issuer = UnitCredentials(self.secrets.registry_key)
        return issuer.issue(unit_id, "stack", asyncio.run(generation()))

    def provision_bucket(self, owner: str) -> BucketGrant:
        """A new bucket with its own access key, usable by nothing else: what a user brings."""
        return self.s3.provision_bucket(owner)

    def start(self) -> None:
        if os.geteuid() == 0:
            # Units run as users of their own, from this interpreter: they must reach it.
            interpreter = {Path(sys.executable).resolve(), Path(sys.prefix), Path(sys.base_prefix)}
            let_others_traverse({p for path in interpreter for p in path.parents})
        if not self.settings.tls:
            log.warning(
                "the stack runs plaintext (%sSTACK_TLS=false): every call, token and key "
                "crosses unencrypted and unauthenticated; for debugging only",
                ENV_PREFIX,
            )
        embedded_postgres = not self.settings.postgres_dsn
        self.ports.check_free(self.settings.host, with_postgres=embedded_postgres)
        if self.settings.tls:
            names = tuple(spec.name for spec in SERVICES)
            self.tls = StackTls(self.state_dir / TLS_FOLDER, self.settings.host, names)
        try:
            server_url = self._start_postgres() if embedded_postgres else self.settings.postgres_dsn
            self.database_url = ensure_database(server_url, self.settings.database)
            self.catalog_database_url = ensure_database(server_url, self.settings.catalog_database)
            self._processes.extend(self.s3.start())
            self._prepare_platform(server_url)
            self._processes.append(self._start_catalog())
            for spec in SERVICES:
                self._processes.append(self._start_service(spec))
        except BaseException:
            self.stop()
            raise
        self._write_endpoints()

    def _prepare_platform(self, server_url: str) -> None:
        """What a global mode needs: a bucket for the platform warehouse; in global-sql, the
        SQL catalog's database with a role of its own (units get it, so not the registry's)."""
        mode = self.catalog_mode
        if mode.is_global:
            self.platform_bucket = self.s3.provision_bucket("platform")
        if mode is CatalogMode.GLOBAL_SQL:
            url = ensure_owned_database(
                server_url,
                SQL_CATALOG_DATABASE,
                SQL_CATALOG_DATABASE,
                self.secrets.sql_catalog_password,
            )
            self.sql_catalog_url = url.replace("postgresql://", "postgresql+psycopg2://", 1)

    def _platform_settings(self) -> dict[str, str]:
        """The platform warehouse's non-secret settings (every service and unit gets them)."""
        grant = self.platform_bucket
        if grant is None:
            return {}
        sts_role = grant.role_arn if self.catalog_mode is CatalogMode.GLOBAL_REST else ""
        return {
            f"{ENV_PREFIX}PLATFORM_BUCKET": grant.bucket,
            f"{ENV_PREFIX}PLATFORM_REGION": grant.region,
            f"{ENV_PREFIX}PLATFORM_ENDPOINT": grant.endpoint,
            f"{ENV_PREFIX}PLATFORM_PATH_STYLE_ACCESS": "true",
            f"{ENV_PREFIX}PLATFORM_STS_ROLE_ARN": sts_role,
        }

    def _platform_secrets(self) -> dict[str, str]:
        """The platform warehouse's secrets: its bucket's key, and in global-sql the SQL
        catalog's URL."""
        grant = self.platform_bucket
        if grant is None:
            return {}
        secrets = {
            f"{ENV_PREFIX}PLATFORM_ACCESS_KEY_ID": grant.access_key.access_key_id,
            f"{ENV_PREFIX}PLATFORM_SECRET_ACCESS_KEY": grant.access_key.secret_access_key,
        }
        if self.sql_catalog_url:
            secrets[f"{ENV_PREFIX}SQL_CATALOG_URL"] = self.sql_catalog_url
        return secrets

    def _start_postgres(self) -> str:
        # Each start is fresh: the S3 endpoint does not keep data across starts either.
        shutil.rmtree(self.postgres.data_dir, ignore_errors=True)
        self._processes.append(self.postgres.start())
        return self.postgres.dsn()

    def _start_catalog(self, timeout: float = 60.0) -> ManagedProcess:
        process = self._catalog_process("dev-catalog", self.ports.catalog, {}, timeout)
        self._bootstrap_catalog()
        return process

    def _catalog_process(
        self, name: str, port: int, env: dict[str, str], timeout: float
    ) -> ManagedProcess:
        prefix = f"{ENV_PREFIX}DEV_CATALOG_"
        clients = json.dumps(
            {
                CATALOG_CLIENT_ID: self.secrets.catalog_client_secret,
                CATALOG_READER_ID: self.secrets.catalog_reader_secret,
            }
        )
        env = {
            f"{ENV_PREFIX}TRACE_CONSOLE": "true",  # spans in the services' logs, unless set
            **self._environ,
            "PYTHONUNBUFFERED": "1",
            f"{ENV_PREFIX}HOST": self.settings.host,
            f"{prefix}PORT": str(port),
            **self.secrets.hand_to(
                name,
                {
                    f"{prefix}DATABASE_URL": self.catalog_database_url,
                    f"{prefix}ENCRYPTION_KEY": self.secrets.catalog_key,
                    f"{prefix}CLIENTS": clients,
                },
            ),
            **self._allowing_own_s3("DEV_CATALOG_ALLOWED_STORAGE_ENDPOINTS"),
            **env,
        }
        process = ManagedProcess(
            name,
            [sys.executable, "-m", "embedded_stack.dev_catalog"],
            self.log_dir / f"{name}.log",
            env=env,
        )
        url = f"http://{self.settings.host}:{port}"
        wait_until(lambda: _http_ok(f"{url}/health"), process, timeout, name)
        return process

    def start_catalog(self, name: str, env: dict[str, str], timeout: float = 60.0) -> str:
        """Starts one more development catalog on the stack's catalog database, as part `name`
        on a free port with env added to its settings (for tests); its base URL."""
        port = free_port(self.settings.host)
        self._processes.append(self._catalog_process(name, port, env, timeout))
        return f"http://{self.settings.host}:{port}"

    def _bootstrap_catalog(self) -> None:
        request = urllib.request.Request(  # noqa: S310 - loopback http
            f"{self.catalog_url}/management/v1/bootstrap",
            data=json.dumps({"accept-terms-of-use": True}).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.catalog_token()}",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - loopback http
                pass
        except urllib.error.HTTPError as exc:
            if b"CatalogAlreadyBootstrapped" not in exc.read():  # a restarted catalog
                raise ProcessFailed(f"bootstrapping the catalog failed: HTTP {exc.code}") from exc

    def _allowing_own_s3(self, name: str) -> dict[str, str]:
        """The allow-list setting `name` with the stack's own S3 endpoint added: it is on
        loopback, which storage endpoints may not point at otherwise."""
        variable = f"{ENV_PREFIX}{name}"
        return {variable: ",".join(filter(None, (self._environ.get(variable), self.s3.endpoint)))}

    def _service_env(self) -> dict[str, str]:
        env = {
            f"{ENV_PREFIX}TRACE_CONSOLE": "true",  # spans in the services' logs, unless set
            **self._environ,
            "PYTHONUNBUFFERED": "1",
            f"{ENV_PREFIX}HOST": self.settings.host,
            f"{ENV_PREFIX}LOG_LEVEL": self.settings.log_level,
            **self.secrets.public_keys(),
            f"{ENV_PREFIX}CATALOG_URI": f"{self.catalog_url}/catalog",
            f"{ENV_PREFIX}CATALOG_MANAGEMENT_URI": f"{self.catalog_url}/management",
            f"{ENV_PREFIX}REGISTRY_TARGET": self.target("warehouse-service"),
            f"{ENV_PREFIX}GATEWAY_WAREHOUSE_TARGET": self.target("warehouse-service"),
            f"{ENV_PREFIX}GATEWAY_RESULT_TARGET": self.target("result-service"),
            f"{ENV_PREFIX}CATALOG_TOKEN_URI": f"{self.catalog_url}/oauth2/token",
            f"{ENV_PREFIX}CATALOG_CLIENT_ID": CATALOG_CLIENT_ID,
            f"{ENV_PREFIX}CATALOG_READER_CLIENT_ID": CATALOG_READER_ID,
            f"{ENV_PREFIX}WAREHOUSE_UNIT_ROOT": str(self.unit_root),
            **self._allowing_own_s3("WAREHOUSE_ALLOWED_STORAGE_ENDPOINTS"),
            **self._platform_settings(),
        }
        for spec in SERVICES:
            scope = spec.settings.scope
            env[f"{ENV_PREFIX}{scope}_PORT"] = str(self.ports.grpc[spec.name])
            env[f"{ENV_PREFIX}{scope}_METRICS_PORT"] = str(self.ports.metrics[spec.name])
        env[f"{ENV_PREFIX}GATEWAY_ICEBERG_PORT"] = str(self.ports.iceberg)
        env[f"{ENV_PREFIX}WAREHOUSE_GATEKEEPER_PORT"] = str(self.ports.gatekeeper)
        if self.tls is not None:
            # Units and their Spark tasks hold no client certificate: the registry's unit port.
            env[f"{ENV_PREFIX}WAREHOUSE_UNIT_PORT"] = str(self.ports.registry_units)
            env[f"{ENV_PREFIX}CU_REGISTRY_TARGET"] = self.registry_unit_target
        return env

    @property
    def iceberg_rest_uri(self) -> str:
        """The gateway's read-only Iceberg REST catalog for users (https in TLS mode)."""
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.settings.host}:{self.ports.iceberg}"

    @property
    def registry_unit_target(self) -> str:
        """host:port where units and their Spark tasks reach the registry: its unit port in TLS
        mode, its one port else."""
        if self.tls is None:
            return self.target("warehouse-service")
        return f"{self.settings.host}:{self.ports.registry_units}"

    def _tls_settings(self, spec: ServiceSpec) -> dict[str, str]:
        if self.tls is None:
            return {f"{ENV_PREFIX}{spec.settings.scope}_PLAINTEXT": "true"}
        return self.tls.service_settings(spec.name, spec.settings.scope)

    def _start_service(
        self,
        spec: ServiceSpec,
        timeout: float = 120.0,
        *,
        name: str | None = None,
        env: dict[str, str] | None = None,
        answers: tuple[str, ...] = ("SERVING",),
    ) -> ManagedProcess:
        name = name or spec.name
        settings = {**self._service_env(), **self._tls_settings(spec), **(env or {})}
        # A secret the caller passed as a file of its own (tests do) wins over the stack's.
        secrets = {
            variable: value
            for variable, value in {
                **self._secrets_of(spec, settings),
                **self._metrics_token_of(spec, settings),
            }.items()
            if f"{variable}_FILE" not in settings
        }
        process = ManagedProcess(
            name,
            [sys.executable, "-m", spec.module],
            self.log_dir / f"{name}.log",
            env={**settings, **self.secrets.hand_to(name, secrets)},
        )
        target, tls = self.target(name), self.client_tls()
        wait_until(lambda: probe(target, tls=tls) in answers, process, timeout, name)
        return process

    def _secrets_of(self, spec: ServiceSpec, settings: dict[str, str]) -> dict[str, str]:
        """The secrets of one service, by setting name: what it alone needs."""
        scoped = f"{ENV_PREFIX}{spec.settings.scope}_"
        if spec.module == "warehouse_service":
            return {
                f"{scoped}DATABASE_URL": self.database_url,
                f"{scoped}PAGE_TOKEN_KEY": self.secrets.page_token_keys["WAREHOUSE"],
                f"{scoped}SIGNING_KEY": self.secrets.registry_key,
                f"{ENV_PREFIX}CATALOG_CLIENT_SECRET": self.secrets.catalog_client_secret,
                f"{ENV_PREFIX}CATALOG_READER_CLIENT_SECRET": self.secrets.catalog_reader_secret,
                **self._platform_secrets(),
            }
        if spec.module == "result_service":
            # Only global-sql's readers open the platform warehouse themselves.
            sql = self._platform_secrets() if self.sql_catalog_url else {}
            return {f"{scoped}PAGE_TOKEN_KEY": self.secrets.page_token_keys["RESULT"], **sql}
        return {
            f"{ENV_PREFIX}JWT_SECRET": self.jwt_secret,
            f"{scoped}SIGNING_KEY": self.secrets.gateway_key,
        }

    def _metrics_token_of(self, spec: ServiceSpec, settings: dict[str, str]) -> dict[str, str]:
        """The stack's metrics token, for a service that serves metrics."""
        scoped = f"{ENV_PREFIX}{spec.settings.scope}_"
        if settings.get(f"{scoped}METRICS_PORT", "0") == "0":
            return {}
        return {f"{scoped}METRICS_TOKEN": self.secrets.metrics_token}

    def unit_for(self, user_id: str, unit_id: str = "", *, timeout: float = 300.0) -> UnitHandle:
        """A running unit of user_id: unit_id (owned by or shared with the user), or the user's
        default unit, created on first use; started and waited for, as a submission would."""
        with self.channel("warehouse-service") as channel:
            response = registry_service_pb2_grpc.UnitLeaseServiceStub(channel).AcquireComputingUnit(
                registry_service_pb2.AcquireComputingUnitRequest(computing_unit_id=unit_id),
                metadata=(bearer(self.internal_token(user_id)),),
                timeout=timeout,
            )
        registration = response.registration
        pid_file = self.unit_root / "logs" / f"{registration.computing_unit_id}.pid"
        return UnitHandle(
            registration.computing_unit_id, registration.endpoint, int(pid_file.read_text())
        )

    def start_part(
        self, name: str, module: str, env: dict[str, str] | None = None, *, serving: bool = True
    ) -> str:
        """Starts one more process of a service ("gateway", "result_service", ...) as part `name`,
        on a free port of its own, with env added to the usual settings; its target. It is
        waited for until it answers health checks (SERVING, unless serving is False)."""
        [spec] = [s for s in SERVICES if s.module == module]
        scope = spec.settings.scope
        self.ports.grpc[name] = free_port(self.settings.host)
        env = {
            f"{ENV_PREFIX}{scope}_PORT": str(self.ports.grpc[name]),
            f"{ENV_PREFIX}{scope}_METRICS_PORT": "0",
            # The stack's gateway serves the stack's Iceberg REST endpoint.
            f"{ENV_PREFIX}GATEWAY_ICEBERG_PORT": "0",
            **(env or {}),
        }
        if module == "warehouse_service":
            # A gatekeeper (and unit port) of its own: the stack's registry holds the stack's.
            env.setdefault(
                f"{ENV_PREFIX}{scope}_GATEKEEPER_PORT", str(free_port(self.settings.host))
            )
        if module == "warehouse_service" and self.tls is not None:
            self.ports.part_unit_ports[name] = free_port(self.settings.host)
            env[f"{ENV_PREFIX}{scope}_UNIT_PORT"] = str(self.ports.part_unit_ports[name])
        answers = ("SERVING",) if serving else ("SERVING", "NOT_SERVING")
        self._processes.append(self._start_service(spec, name=name, env=env, answers=answers))
        return self.target(name)

    def stop_part(self, name: str) -> None:
        """Stops a part start_part started, and forgets it."""
        part = self._part(name)
        part.stop()
        self._processes.remove(part)
        del self.ports.grpc[name]
        self.ports.part_unit_ports.pop(name, None)

    def kill(self, part: str) -> None:
        """Ends a part at once (SIGKILL), as a crash would; for tests."""
        self._part(part).kill()

    def interrupt(self, part: str) -> None:
        """Stops one part ("postgres" or "dev-catalog") as an outage would; for tests."""
        self._part(part).stop()

    def resume(self, part: str) -> None:
        """Starts an interrupted (or killed) part again, with its data as it was: "postgres",
        "dev-catalog", or one of the services, on its own port."""
        old = self._part(part)
        services = {spec.name: spec for spec in SERVICES}
        if part in services:
            new = self._start_service(services[part])
        else:
            new = self.postgres.start() if part == "postgres" else self._start_catalog()
        self._processes[self._processes.index(old)] = new

    def pid(self, part: str) -> int:
        """The process id of a part (a service's name, "postgres", "dev-catalog", ...)."""
        return self._part(part).pid

    def _part(self, name: str) -> ManagedProcess:
        return next(p for p in self._processes if p.name == name)

    def check_running(self) -> None:
        """Raises ProcessFailed if any part has exited."""
        for process in self._processes:
            process.check_running()

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        self.s3.forget_admin_key()
        shutil.rmtree(self.unit_root, ignore_errors=True)
        (self.state_dir / ENDPOINTS_FILE).unlink(missing_ok=True)

    def endpoints(self) -> dict[str, Any]:
        return {
            "grpc": {spec.name: self.target(spec.name) for spec in SERVICES},
            "metrics": {
                spec.name: f"http://{self.settings.host}:{port}/metrics"
                for spec in SERVICES
                if (port := self.ports.metrics[spec.name])
            },
            # The bearer token every /metrics above requires.
            "metrics_token": str(self.secrets.metrics_token_file),
            "postgres": _without_password(self.database_url),
            "s3": self.s3.endpoint,
            "catalog": f"{self.catalog_url}/catalog",
            "iceberg_rest": self.iceberg_rest_uri,
            "catalog_management": f"{self.catalog_url}/management",
            "catalog_mode": self.catalog_mode.value,
            "logs": str(self.log_dir),
            "tls": self._tls_endpoints(),
        }

    def _tls_endpoints(self) -> dict[str, Any]:
        """Whether TLS is on, and then the CA that verifies every service's certificate."""
        if self.tls is None:
            return {"enabled": False}
        gateway = self.tls.certificates["gateway"]
        return {
            "enabled": True,
            "ca": str(self.tls.ca_file),
            "registry_unit_port": self.registry_unit_target,
            # What tools present to the services that require a client certificate (the
            # gateway's: `texera-lake status`).
            "client_certificate": str(gateway.certificate),
            "client_key": str(gateway.key),
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
