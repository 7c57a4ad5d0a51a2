"""Settings of the warehouse registry (see service_runtime.config)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from catalog_map.platform import PlatformWarehouseSettings
from catalog_map.trust import OutboundTlsSettings
from service_runtime.config import (
    ENV_PREFIX,
    ConfigError,
    ServerSettings,
    page_token_key_setting,
    setting,
)
from service_runtime.endpoint_guard import parse_allowed
from unit_launcher.base import LAUNCHERS
from unit_launcher.cpu_groups import MODES as CPU_GROUP_MODES
from unit_launcher.size_class import SizeClass
from warehouse_service.catalog import delete_profile
from warehouse_service.catalog_modes import CatalogMode

#: Scope of a warehouse's token in the catalog's token exchange: its catalog id and read or
#: write (see CATALOG_WAREHOUSE_TOKEN_SCOPE).
WAREHOUSE_SCOPE = "warehouse:{warehouse}:{access}"
#: TEXERA_LAKE_WAREHOUSE_DATABASE_TLS: verified against a CA bundle, or encrypted only.
VERIFY_FULL = "verify-full"
REQUIRE_UNVERIFIED = "require-unverified"
#: The values DATABASE_TLS takes ("": as the database URL says).
DATABASE_TLS_MODES = ("", VERIFY_FULL, REQUIRE_UNVERIFIED)


@dataclass(frozen=True, repr=False)
class WarehouseServiceSettings(ServerSettings, PlatformWarehouseSettings, OutboundTlsSettings):
    scope = "WAREHOUSE"
    catalog_mode: str = setting(
        "CATALOG_MODE",
        CatalogMode.PER_USER.value,
        "per-user (users register warehouses on their own buckets), global-rest (one platform "
        "warehouse in the REST catalog) or global-sql (one platform warehouse on pyiceberg's "
        "SqlCatalog in PostgreSQL; units then hold database credentials). See "
        "docs/warehouses.md.",
    )
    port: int = setting("PORT", 50051, "gRPC port of the warehouse registry.", scoped=True)
    unit_port: int = setting(
        "UNIT_PORT",
        0,
        "A second gRPC port, for computing units and their executions' Spark tasks, which "
        "present no client certificate: TLS with the service's certificate but no client "
        "certificate asked, the registry's internal services alone, and only its own tokens (units' "
        "credentials, executions' tokens). 0: none. Needs client certificates required on "
        "the main port (else units call that one).",
        scoped=True,
    )
    gatekeeper_port: int = setting(
        "GATEKEEPER_PORT",
        8183,
        "Port of the catalog gatekeeper: the Iceberg REST catalog that computing units reach, "
        "one execution's tables per token (see docs/security.md). Served over TLS with the "
        "registry's certificate when it has one. Needed in the REST catalog modes.",
        scoped=True,
    )
    gatekeeper_uri: str = setting(
        "GATEKEEPER_URI",
        "",
        "Base URI at which computing units reach the gatekeeper. Empty: https (http without "
        "a certificate) at UNIT_ADVERTISED_HOST, else HOST (127.0.0.1 for 0.0.0.0), and "
        "GATEKEEPER_PORT.",
        scoped=True,
    )
    gatekeeper_token_seconds: float = setting(
        "GATEKEEPER_TOKEN_SECONDS",
        300.0,
        "Lifetime of an execution's gatekeeper token (at least 30 s); its unit renews it "
        "before it expires.",
        scoped=True,
    )
    metrics_port: int = setting(
        "METRICS_PORT", 9451, "Metrics port of the warehouse registry; 0 turns it off.", scoped=True
    )
    database_url: str = setting(
        "DATABASE_URL",
        "",
        "PostgreSQL URL of the registry's database (postgresql://user:password@host:port/db). "
        "Required.",
        secret=True,
        scoped=True,
    )
    database_tls: str = setting(
        "DATABASE_TLS",
        "",
        "TLS to the registry's database: verify-full (the server's certificate checked against "
        "DATABASE_CA_FILE, or the URL's sslrootcert, and its name against the host), "
        "require-unverified (encrypted, any certificate, logged as a WARNING), or empty: as "
        "the URL's sslmode says (verify-full there is handled as here).",
        scoped=True,
    )
    database_ca_file: str = setting(
        "DATABASE_CA_FILE",
        "",
        "CA bundle (PEM file) the database's certificate is verified against under "
        "verify-full; empty: the system's trust store.",
        scoped=True,
    )
    page_token_key: str = page_token_key_setting()
    signing_key: str = setting(
        "SIGNING_KEY",
        "",
        "Ed25519 private key (PEM) that signs the credentials the registry issues to computing "
        "units; its public half is TEXERA_LAKE_REGISTRY_PUBLIC_KEY. Required.",
        secret=True,
        scoped=True,
    )
    catalog_uri: str = setting(
        "CATALOG_URI",
        "http://127.0.0.1:8181/catalog",
        "Iceberg REST catalog URI that computing units and readers are told to use.",
    )
    catalog_management_uri: str = setting(
        "CATALOG_MANAGEMENT_URI",
        "http://127.0.0.1:8181/management",
        "Base URI of the catalog's (Lakekeeper's) management API.",
    )
    catalog_token_uri: str = setting(
        "CATALOG_TOKEN_URI",
        "http://127.0.0.1:8181/oauth2/token",
        "OAuth2 token endpoint of the catalog's OpenID provider (client credentials and token "
        "exchange).",
    )
    catalog_client_id: str = setting(
        "CATALOG_CLIENT_ID", "texera-lake-registry", "OAuth2 client id of the registry."
    )
    catalog_client_secret: str = setting(
        "CATALOG_CLIENT_SECRET",
        "",
        "OAuth2 client secret of the registry. Empty: the catalog is called without "
        "authentication (only for a catalog that has none).",
        secret=True,
    )
    catalog_reader_client_id: str = setting(
        "CATALOG_READER_CLIENT_ID",
        "",
        "OAuth2 client id of a second client of the catalog, which the registry grants reading "
        "each warehouse (Lakekeeper's select) as it creates it: readers' tokens (the result "
        "service's, the gateway's Iceberg REST catalog's, the gatekeeper's loads of sources) "
        "are then this client's, so storage credentials vended to readers only read. Empty: "
        "the registry's own client, narrowed by the token exchange's scope where the catalog "
        "does that.",
    )
    catalog_reader_client_secret: str = setting(
        "CATALOG_READER_CLIENT_SECRET",
        "",
        "OAuth2 client secret of the reader client (CATALOG_READER_CLIENT_ID).",
        secret=True,
    )
    catalog_oauth_scope: str = setting(
        "CATALOG_OAUTH_SCOPE", "lakekeeper", "Scope the registry asks its catalog token for."
    )
    catalog_oauth_audience: str = setting(
        "CATALOG_OAUTH_AUDIENCE",
        "",
        "Audience sent with token requests, for providers that want one; empty sends none.",
    )
    catalog_warehouse_token_scope: str = setting(
        "CATALOG_WAREHOUSE_TOKEN_SCOPE",
        WAREHOUSE_SCOPE,
        "Scope asked for in the token exchange of a warehouse's token: {warehouse} is the "
        "catalog's warehouse id, {access} read or write. A provider that accepts only scopes "
        "it knows (Keycloak) needs one of those, such as lakekeeper; see docs/operations.md "
        "for what such a token reaches.",
    )
    catalog_delete_profile: str = setting(
        "CATALOG_DELETE_PROFILE",
        "hard",
        "Delete profile of the warehouses the registry creates in Lakekeeper: hard (a dropped "
        "table is gone at once) or soft:<seconds> (kept that long; DeleteWarehouse with purge "
        "sets hard first).",
    )
    database_pool_size: int = setting(
        "DATABASE_POOL_SIZE",
        10,
        "Largest number of database connections of the registry.",
        scoped=True,
    )
    catalog_timeout_seconds: float = setting(
        "CATALOG_TIMEOUT_SECONDS", 15.0, "Timeout of one call to the catalog.", scoped=True
    )
    catalog_attempts: int = setting(
        "CATALOG_ATTEMPTS",
        3,
        "Attempts of a catalog call that fails with 5xx or no answer.",
        scoped=True,
    )
    delete_wait_seconds: float = setting(
        "DELETE_WAIT_SECONDS",
        60.0,
        "How long a delete waits for the catalog to finish dropping a warehouse's tables.",
        scoped=True,
    )
    heartbeat_interval_seconds: float = setting(
        "HEARTBEAT_INTERVAL_SECONDS",
        5.0,
        "How often computing units are told to send heartbeats.",
        scoped=True,
    )
    lease_seconds: float = setting(
        "LEASE_SECONDS",
        15.0,
        "A computing unit without a heartbeat for this long is lost; its unfinished executions fail.",
        scoped=True,
    )
    unit_credential_seconds: float = setting(
        "UNIT_CREDENTIAL_SECONDS",
        600.0,
        "How long a computing unit's credential lives. The unit gets a fresh one with every "
        "registration and heartbeat; the first must outlast the unit's start, and each the "
        "registry outages units should ride out. A credential of a launch that ended (the unit "
        "restarted, stopped or was deleted) is refused at once, whatever its age.",
        scoped=True,
    )
    unit_issuer_certificate: str = setting(
        "UNIT_ISSUER_CERTIFICATE",
        "",
        "the PEM certificate chain (its own certificate first) of the CA that issues computing "
        "units' TLS certificates: an intermediate of the mesh's CA, best constrained to the "
        "names under unit.texera-lake and to no IP address. Set: every unit is launched with "
        "a certificate of its own, serves mutual TLS and takes users' calls only from the "
        "gateway's certificate (the gateway needs TEXERA_LAKE_GATEWAY_UNITS_TLS=true). Empty: "
        "units serve plaintext.",
        scoped=True,
        as_file=True,
    )
    unit_issuer_key: str = setting(
        "UNIT_ISSUER_KEY",
        "",
        "the unencrypted PEM private key (EC) of the units' issuer. Required with it.",
        secret=True,
        scoped=True,
        as_file=True,
    )
    unit_certificate_seconds: float = setting(
        "UNIT_CERTIFICATE_SECONDS",
        3600.0,
        "How long a computing unit's TLS certificate lives. A unit asks for a new one, for the "
        "key it keeps, in its heartbeats once half its certificate's life is over.",
        scoped=True,
    )
    execution_token_max_seconds: float = setting(
        "EXECUTION_TOKEN_MAX_SECONDS",
        24 * 3600.0,
        "Longest life of an execution's token (what its Spark tasks renew storage credentials "
        "with); a unit asks for its run time limit and renews past this.",
        scoped=True,
    )
    cleanup_interval_seconds: float = setting(
        "CLEANUP_INTERVAL_SECONDS",
        5.0,
        "How often the registry looks for due cleanups (failed, cancelled and deleted "
        "executions' tables and files) and due maintenance of ended executions' tables.",
        scoped=True,
    )
    cleanup_max_backoff_seconds: float = setting(
        "CLEANUP_MAX_BACKOFF_SECONDS",
        900.0,
        "Longest wait between two attempts at one execution's cleanup (the waits double from "
        "the cleanup interval); it is retried until done.",
        scoped=True,
    )
    usage_interval_seconds: float = setting(
        "USAGE_INTERVAL_SECONDS",
        5.0,
        "How often the registry reads what newly ended executions store from their tables' "
        "metadata, and refreshes the per-warehouse usage gauges.",
        scoped=True,
    )
    usage_max_backoff_seconds: float = setting(
        "USAGE_MAX_BACKOFF_SECONDS",
        900.0,
        "Longest wait between two attempts at reading one execution's usage (the waits double "
        "from the usage interval); it is retried until it succeeds.",
        scoped=True,
    )
    cleanup_hold_seconds: float = setting(
        "CLEANUP_HOLD_SECONDS",
        300.0,
        "How long a registry holds a cleanup or maintenance it took up before another replica "
        "may take it over (how soon work a crashed replica left midway resumes).",
        scoped=True,
    )
    retention_interval_seconds: float = setting(
        "RETENTION_INTERVAL_SECONDS",
        300.0,
        "How often the registry applies the warehouses' retention policies (deleting the "
        "ended executions they say to).",
        scoped=True,
    )
    orphan_margin_seconds: float = setting(
        "ORPHAN_MARGIN_SECONDS",
        3600.0,
        "Maintenance removes a file no snapshot references only once it is older than this, "
        "and tends an execution's tables only once it ended longer ago than this.",
        scoped=True,
    )
    allowed_storage_endpoints: str = setting(
        "ALLOWED_STORAGE_ENDPOINTS",
        "",
        "Storage endpoints (http(s)://host:port, comma separated) allowed although they "
        "point at a loopback, private or otherwise internal address.",
        scoped=True,
    )
    catalog_project_id: str = setting(
        "CATALOG_PROJECT_ID",
        "00000000-0000-0000-0000-000000000000",
        "Lakekeeper project that holds the warehouses.",
    )

    unit_launcher: str = setting(
        "UNIT_LAUNCHER",
        "process",
        "How computing units run: process (a local process tree each) or kubernetes (a Pod each).",
        scoped=True,
    )
    unit_root: str = setting(
        "UNIT_ROOT",
        "",
        "Folder of the process launcher's units (their homes and logs). Empty means "
        "texera-lake-units in the system's temporary folder.",
        scoped=True,
    )
    unit_cpu_groups: str = setting(
        "UNIT_CPU_GROUPS",
        "auto",
        "Whether the process launcher runs each unit in a cgroup of its own, weighted by its "
        "cores, so that busy units share the CPU by size and leave the others and the mesh "
        "theirs: auto (when run as root and a cgroup cpu controller can be managed), on "
        "(refuse to start without) or off.",
        scoped=True,
    )
    unit_max_processes: int = setting(
        "UNIT_MAX_PROCESSES",
        8192,
        "Processes and threads one unit of the process launcher may have at once, users' "
        "included (its cgroup's pids limit; see TEXERA_LAKE_CU_WORKER_PROCESSES for one "
        "task's).",
        scoped=True,
    )
    unit_advertised_host: str = setting(
        "UNIT_ADVERTISED_HOST",
        "",
        "Host at which other services reach the process launcher's units. Empty means HOST.",
        scoped=True,
    )
    unit_idle_seconds: float = setting(
        "UNIT_IDLE_SECONDS",
        900.0,
        "A computing unit without an execution for this long is stopped; the next "
        "submission starts it again.",
        scoped=True,
    )
    unit_start_timeout_seconds: float = setting(
        "UNIT_START_TIMEOUT_SECONDS",
        300.0,
        "A launched computing unit that has not registered within this time is FAILED.",
        scoped=True,
    )
    share_unconfined_units: bool = setting(
        "SHARE_UNCONFINED_UNITS",
        False,
        "Lets a computing unit that cannot confine the Python workers that run users' code "
        "(their own user, PID and mount namespaces; some containers forbid user namespaces) "
        "be shared and run the executions of the users it is shared with. Off: such a unit "
        "runs only its owner's (FAILED_PRECONDITION, COMPUTING_UNIT_NOT_CONFINED).",
        scoped=True,
    )
    unit_default_cores: int = setting(
        "UNIT_DEFAULT_CORES", 1, "Cores of a user's default unit, made on first use.", scoped=True
    )
    unit_default_memory_mib: int = setting(
        "UNIT_DEFAULT_MEMORY_MIB",
        1024,
        "Memory (MiB) of a user's default unit, made on first use.",
        scoped=True,
    )
    unit_pool_size: int = setting(
        "UNIT_POOL_SIZE",
        0,
        "Computing units kept started and warmed up per size class, each handed at once to a "
        "user's new, default or restarted unit of its size, and replaced; 0 turns the pool "
        "off. With the kubernetes launcher, pooled Pods outlive the registry and the next one "
        "keeps them.",
        scoped=True,
    )
    unit_pool_classes: str = setting(
        "UNIT_POOL_CLASSES",
        "",
        "The size classes the pool keeps units of, as CORESxMEMORY_MIB, comma-separated (for "
        "example 1x1024,2x4096). Empty: the default unit's size.",
        scoped=True,
    )

    def pool_classes(self) -> list[SizeClass]:
        """The size classes of the warm pool."""
        default = SizeClass(self.unit_default_cores, self.unit_default_memory_mib)
        return SizeClass.parse_list(self.unit_pool_classes) or [default]

    def validate(self) -> None:
        super().validate()
        try:
            self.catalog_warehouse_token_scope.format(warehouse="w", access="read")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"{ENV_PREFIX}CATALOG_WAREHOUSE_TOKEN_SCOPE: only {{warehouse}} and {{access}} "
                f"may be filled in ({type(exc).__name__}: {exc})"
            ) from exc
        try:
            delete_profile.parse(self.catalog_delete_profile)
        except ValueError as exc:
            raise ConfigError(f"{ENV_PREFIX}CATALOG_DELETE_PROFILE: {exc}") from exc
        self.require("database_url")
        if self.database_tls not in DATABASE_TLS_MODES:
            raise ConfigError(
                f"{ENV_PREFIX}WAREHOUSE_DATABASE_TLS must be verify-full, require-unverified "
                "or empty"
            )
        self._validate_catalog_mode()
        self.require_secret_length("page_token_key")
        self.require("signing_key")
        self.require("registry_public_key")
        if self.unit_credential_seconds < max(60.0, 4 * self.heartbeat_interval_seconds):
            raise ConfigError(
                f"{self.variable_of('unit_credential_seconds')} must be at least 60 s and four "
                f"times {self.variable_of('heartbeat_interval_seconds')} (each heartbeat renews it)"
            )
        self._validate_unit_issuer()
        if self.catalog_reader_client_id and not self.catalog_reader_client_secret:
            raise ConfigError(
                f"{self.variable_of('catalog_reader_client_id')} needs "
                f"{self.variable_of('catalog_reader_client_secret')}"
            )
        if self.gatekeeper_token_seconds < 30:
            raise ConfigError(f"{self.variable_of('gatekeeper_token_seconds')} must be at least 30")
        if self.mode is not CatalogMode.GLOBAL_SQL and not self.gatekeeper_port:
            raise ConfigError(
                f"{self.variable_of('gatekeeper_port')} is needed: computing units reach the "
                f"catalog through the gatekeeper in catalog mode {self.mode.value}"
            )
        if self.unit_port and not self.tls_require_client_certificate:
            raise ConfigError(
                f"{self.variable_of('unit_port')} needs "
                f"{self.variable_of('tls_require_client_certificate')}=true: without client "
                "certificates required, units call the main port"
            )
        try:
            parse_allowed(self.allowed_storage_endpoints)
        except ValueError as exc:
            raise ConfigError(f"{ENV_PREFIX}WAREHOUSE_ALLOWED_STORAGE_ENDPOINTS: {exc}") from exc
        if self.unit_launcher not in LAUNCHERS:
            raise ConfigError(
                f"TEXERA_LAKE_WAREHOUSE_UNIT_LAUNCHER must be one of {', '.join(LAUNCHERS)}"
            )
        self._validate_pool()
        self._validate_groups()
        if self.unit_idle_seconds <= 0 or self.unit_start_timeout_seconds <= 0:
            raise ConfigError(
                "TEXERA_LAKE_WAREHOUSE_UNIT_IDLE_SECONDS and "
                "TEXERA_LAKE_WAREHOUSE_UNIT_START_TIMEOUT_SECONDS must be above 0"
            )

    def _validate_groups(self) -> None:
        if self.unit_cpu_groups not in CPU_GROUP_MODES:
            raise ConfigError(
                f"{self.variable_of('unit_cpu_groups')} must be one of {', '.join(CPU_GROUP_MODES)}"
            )
        if self.unit_max_processes < 64:
            raise ConfigError(f"{self.variable_of('unit_max_processes')} must be at least 64")

    def _validate_pool(self) -> None:
        if self.unit_pool_size < 0:
            raise ConfigError(f"{self.variable_of('unit_pool_size')} must be 0 or more")
        try:
            SizeClass.parse_list(self.unit_pool_classes)
        except ValueError as exc:
            raise ConfigError(f"{self.variable_of('unit_pool_classes')}: {exc}") from exc

    def _validate_unit_issuer(self) -> None:
        variable = self.variable_of
        if bool(self.unit_issuer_certificate) != bool(self.unit_issuer_key):
            raise ConfigError(
                f"{variable('unit_issuer_certificate')} and {variable('unit_issuer_key')} "
                "go together"
            )
        if self.unit_issuer_certificate and not self.tls_ca_bundle:
            raise ConfigError(
                f"{variable('unit_issuer_certificate')} needs {variable('tls_ca_bundle')}: "
                "units check their callers' certificates against it"
            )
        if self.unit_certificate_seconds < max(60.0, 4 * self.heartbeat_interval_seconds):
            raise ConfigError(
                f"{variable('unit_certificate_seconds')} must be at least 60 s and four times "
                f"{variable('heartbeat_interval_seconds')} (heartbeats renew it)"
            )

    def _validate_catalog_mode(self) -> None:
        modes = [mode.value for mode in CatalogMode]
        if self.catalog_mode not in modes:
            raise ConfigError(f"{ENV_PREFIX}CATALOG_MODE must be one of {', '.join(modes)}")
        if self.mode.is_global:
            for needed in (
                "platform_bucket",
                "platform_access_key_id",
                "platform_secret_access_key",
            ):
                self.require(needed)
        if self.mode.is_global and self.platform_endpoint:
            try:
                parse_allowed(self.platform_endpoint)
            except ValueError as exc:
                raise ConfigError(f"{ENV_PREFIX}PLATFORM_ENDPOINT: {exc}") from exc
        if self.mode is CatalogMode.GLOBAL_SQL:
            self.require("sql_catalog_url")

    @property
    def mode(self) -> CatalogMode:
        return CatalogMode(self.catalog_mode)

    def gatekeeper_address(self) -> str:
        """How computing units reach the gatekeeper."""
        if self.gatekeeper_uri:
            return self.gatekeeper_uri.rstrip("/")
        host = self.unit_advertised_host or self.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host  # noqa: S104 - a wildcard
        scheme = "https" if self.tls_certificate else "http"
        return f"{scheme}://{host}:{self.gatekeeper_port}"

    @property
    def unit_folder(self) -> Path:
        return Path(self.unit_root or Path(tempfile.gettempdir(), "texera-lake-units"))
