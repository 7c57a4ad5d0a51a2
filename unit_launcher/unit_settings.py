"""The settings a computing unit reads (see service_runtime.config): the contract of the
environment its launcher gives it, which the registry fills in and the unit reads."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from catalog_map.settings import WarehouseClientSettings
from service_runtime.config import ConfigError, setting


def root_folders(text: str) -> list[str]:
    """The folders FILE_SOURCE_ROOTS names: comma-separated absolute paths (none: the
    shipped examples); ValueError for one that is not absolute."""
    roots = [part.strip() for part in text.split(",") if part.strip()]
    for root in roots:
        if not os.path.isabs(root):
            raise ValueError(f"{root!r} is not an absolute path")
    return roots


@dataclass(frozen=True, repr=False)
class ComputingUnitSettings(WarehouseClientSettings):
    scope = "CU"
    # The registry decides: it launches units with certificates when it issues them.
    plaintext_is_explicit = False
    port: int = setting("PORT", 50052, "gRPC port of the computing unit.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9452, "Metrics port of the computing unit; 0 turns it off.", scoped=True
    )
    unit_id: str = setting(
        "ID", "", "Identifier of this computing unit. Empty means cu-<host name>.", scoped=True
    )
    credential: str = setting(
        "CREDENTIAL",
        "",
        "The unit's own credential, issued by the registry when it launched the unit. Required.",
        secret=True,
        scoped=True,
    )
    hand_over_pipe: str = setting(
        "HAND_OVER_PIPE",
        "",
        "Set by the registry's launcher for a unit of its warm pool: the named pipe on which "
        "the started, warmed unit waits for the identity of the user's unit it becomes. "
        "Empty: the unit starts as the unit its other settings name.",
        scoped=True,
    )
    unit_registry_target: str = setting(
        "REGISTRY_TARGET",
        "",
        "host:port of the registry for this unit and its executions' Spark tasks: the "
        "registry's unit port (TEXERA_LAKE_WAREHOUSE_UNIT_PORT) when its main port requires "
        "client certificates. Empty: TEXERA_LAKE_REGISTRY_TARGET.",
        scoped=True,
    )
    advertised_address: str = setting(
        "ADVERTISED_ADDRESS",
        "",
        "host:port at which other services reach this unit. Empty means HOST:PORT.",
        scoped=True,
    )
    spark_master: str = setting(
        "SPARK_MASTER",
        "local[*]",
        "Spark master URL: local[*], or a cluster's master. Set in the registry's environment, "
        "the master of every unit it launches as a process (else local[<the unit's cores>]).",
        scoped=True,
    )
    spark_auth_secret: str = setting(
        "SPARK_AUTH_SECRET",
        "",
        "The secret a Spark standalone cluster's master, workers and applications share "
        "(spark.authenticate.secret on the cluster's own daemons). Required with a cluster's "
        "SPARK_MASTER; in local mode the unit's JVM makes a secret of its own.",
        secret=True,
        scoped=True,
    )
    spark_driver_memory: str = setting(
        "SPARK_DRIVER_MEMORY", "2g", "Memory of the Spark driver JVM.", scoped=True
    )
    spark_driver_java_options: str = setting(
        "SPARK_DRIVER_JAVA_OPTIONS",
        "",
        "More options of the Spark driver JVM, which in local mode runs the tasks too; they "
        "come after the unit's own (its temporary folder, its JIT thresholds, its memory "
        "release), so they win. For example -XX:TieredStopAtLevel=1 spends less CPU on short "
        "jobs and runs long ones up to 4.7 times slower. Part of the JVM's command line: no "
        "secret here.",
        scoped=True,
    )
    spark_driver_release_seconds: float = setting(
        "SPARK_DRIVER_RELEASE_SECONDS",
        30.0,
        "How soon the Spark driver JVM gives memory it no longer uses back to the operating "
        "system: after this long without a garbage collection it runs one and shrinks its heap "
        "to a fifth free at most, and it trims its native heap this often. 0 keeps the JVM's "
        "defaults, under which an idle heap keeps the size work made it.",
        scoped=True,
    )
    python_idle_seconds: float = setting(
        "PYTHON_IDLE_SECONDS",
        60.0,
        "How long a unit in Spark's local mode with nothing to run (no execution running or "
        "queued, no submission, no Spark job) keeps its Python worker daemon, which holds some "
        "110 MiB of preloaded modules, before ending it; the next Python task starts it again "
        "and waits some 0.6 s for it. A pooled unit keeps it until it is handed over. 0 keeps "
        "it for the unit's life.",
        scoped=True,
    )
    capacity: int = setting(
        "CAPACITY", 2, "Executions run at once; more wait, queued in order.", scoped=True
    )
    warm_up_jobs: int = setting(
        "WARM_UP_JOBS",
        60,
        "Small jobs a new unit runs while no execution is queued or running, so that the "
        "JVM has compiled Spark's busiest code before users' workflows need it; 0 for none.",
        scoped=True,
    )
    target_file_size_bytes: int = setting(
        "TARGET_FILE_SIZE_BYTES",
        128 * 1024 * 1024,
        "Size at which a task rolls over to a new Parquet data file.",
        scoped=True,
    )
    commit_interval_seconds: float = setting(
        "COMMIT_INTERVAL_SECONDS",
        30.0,
        "A long write commits the files finished so far at most this often.",
        scoped=True,
    )
    commit_max_bytes: int = setting(
        "COMMIT_MAX_BYTES",
        1024 * 1024 * 1024,
        "A long write commits once this many bytes of finished files wait.",
        scoped=True,
    )
    commit_retry_seconds: float = setting(
        "COMMIT_RETRY_SECONDS",
        60.0,
        "How long commits and telemetry appends retry a catalog or storage that fails "
        "transiently (5xx, refused connections, timeouts) before the execution fails.",
        scoped=True,
    )
    telemetry_interval_seconds: float = setting(
        "TELEMETRY_INTERVAL_SECONDS",
        10.0,
        "How often runtime statistics and console messages are appended to their tables.",
        scoped=True,
    )
    file_source_roots: str = setting(
        "FILE_SOURCE_ROOTS",
        "",
        "Comma-separated absolute folders that file sources may read (real paths, symlinks "
        "resolved). Empty means the repository's examples/ folder only.",
        scoped=True,
    )

    # Limits: what one execution may ask for or use (see "Limits" in docs/computing-units.md).
    max_operators: int = setting("MAX_OPERATORS", 500, "Operators in one workflow.", scoped=True)
    max_source_partitions: int = setting(
        "MAX_SOURCE_PARTITIONS", 1000, "Partitions a range source may ask for.", scoped=True
    )
    max_range_rows: int = setting(
        "MAX_RANGE_ROWS", 10_000_000_000, "Rows of one range source.", scoped=True
    )
    max_inline_rows: int = setting(
        "MAX_INLINE_ROWS", 10_000, "Rows of one inline source.", scoped=True
    )
    max_inline_bytes: int = setting(
        "MAX_INLINE_BYTES", 1024 * 1024, "Encoded bytes of one inline source.", scoped=True
    )
    max_expression_chars: int = setting(
        "MAX_EXPRESSION_CHARS",
        20_000,
        "Characters of one expression (filter, projection, aggregate) or SQL query.",
        scoped=True,
    )
    max_expression_depth: int = setting(
        "MAX_EXPRESSION_DEPTH",
        64,
        "Nesting of parentheses and brackets in one expression or SQL query.",
        scoped=True,
    )
    max_run_seconds: float = setting(
        "MAX_RUN_SECONDS",
        3600.0,
        "Run time of one execution, from its start; then it is stopped.",
        scoped=True,
    )
    max_result_bytes: int = setting(
        "MAX_RESULT_BYTES",
        10 * 1024**3,
        "Bytes one execution writes across its outputs; then its write is stopped.",
        scoped=True,
    )
    worker_memory_bytes: int = setting(
        "WORKER_MEMORY_BYTES",
        2 * 1024**3,
        "Address space of each Python worker (users' functions and result writers).",
        scoped=True,
    )
    worker_open_files: int = setting(
        "WORKER_OPEN_FILES", 1024, "Open files of each Python worker.", scoped=True
    )
    worker_processes: int = setting(
        "WORKER_PROCESSES",
        256,
        "Processes and threads of each sandboxed task (and of the Python workers' OS user "
        "when the unit runs as root).",
        scoped=True,
    )
    sandbox_tasks: bool = setting(
        "SANDBOX_TASKS",
        True,
        "Runs each task of users' code in Linux namespaces of its own (docs/isolation.md). "
        "Where the kernel refuses them, tasks run unsandboxed, the log says why, and the "
        "registry gives the unit no guest's execution.",
        scoped=True,
    )
    shares_os_user: bool = setting(
        "SHARES_OS_USER",
        False,
        "The unit runs as the OS user of other services of the mesh (a process launcher "
        "that is not root sets it): its tasks could read that user's files, so the unit "
        "tells the registry its workers are not confined.",
        scoped=True,
    )
    processes_bounded: bool = setting(
        "PROCESSES_BOUNDED",
        True,
        "Every process of the unit, users' included, is in a cgroup of the unit that bounds "
        "their memory and number and ends them with the unit (a Pod's, or the process "
        "launcher's). The process launcher sets it false for a unit it cannot give one: the "
        "unit then tells the registry its workers are not confined.",
        scoped=True,
    )
    memory_budget_bytes: int = setting(
        "MEMORY_BUDGET_BYTES",
        0,
        "Set by the unit's launcher: all the memory the unit may hold, its tasks' memory file "
        "systems included (a Pod's memory limit, the process launcher's cgroup of the unit). "
        "0: not known.",
        scoped=True,
    )
    worker_user: str = setting(
        "WORKER_USER",
        "texera_worker",
        "OS user the Python workers run as when the unit runs as root; created on first use.",
        scoped=True,
    )

    @property
    def registry(self) -> str:
        """Where this unit and its tasks call the registry."""
        return self.unit_registry_target or self.registry_target

    @property
    def computing_unit_id(self) -> str:
        return self.unit_id or f"cu-{socket.gethostname()}"[:64]

    @property
    def client_certificate(self) -> tuple[str, str]:
        """Only a client certificate set as such: the one the unit serves with is renewed in
        memory (service_runtime.tls.held_certificate), so a copy read at start would go stale.
        Units reach the registry on its unit port, which asks for none."""
        return self.tls_client_certificate, self.tls_client_key

    def address(self, bound_port: int) -> str:
        return self.advertised_address or f"{self.host}:{bound_port}"

    def validate(self) -> None:
        super().validate()
        self.require("credential")
        if not self.spark_master.startswith("local") and not self.spark_auth_secret:
            raise ConfigError(
                f"{self.variable_of('spark_auth_secret')} must be set: Spark's listeners on a "
                "cluster take only connections that know the cluster's secret"
            )
        if not 1 <= self.capacity <= 1000:
            raise ConfigError("TEXERA_LAKE_CU_CAPACITY must be 1 to 1000")
        if self.target_file_size_bytes < 1024 * 1024:
            raise ConfigError("TEXERA_LAKE_CU_TARGET_FILE_SIZE_BYTES must be at least 1 MiB")
        if self.commit_retry_seconds < 0:
            raise ConfigError(f"{self.variable_of('commit_retry_seconds')} must be 0 or more")
        if self.warm_up_jobs < 0:
            raise ConfigError(f"{self.variable_of('warm_up_jobs')} must be 0 or more")
        for name in ("spark_driver_release_seconds", "python_idle_seconds"):
            if not 0 <= getattr(self, name) <= 86400:
                raise ConfigError(f"{self.variable_of(name)} must be 0 to 86400 (a day)")
        if self.memory_budget_bytes < 0:
            raise ConfigError(f"{self.variable_of('memory_budget_bytes')} must be 0 or more")
        if self.worker_memory_bytes < 256 * 1024 * 1024:
            raise ConfigError("TEXERA_LAKE_CU_WORKER_MEMORY_BYTES must be at least 256 MiB")
        for name in (
            "max_operators",
            "max_source_partitions",
            "max_range_rows",
            "max_inline_rows",
            "max_inline_bytes",
            "max_expression_chars",
            "max_expression_depth",
            "max_run_seconds",
            "max_result_bytes",
            "worker_open_files",
            "worker_processes",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{self.variable_of(name)} must be positive")
        try:
            root_folders(self.file_source_roots)
        except ValueError as exc:
            raise ConfigError(f"TEXERA_LAKE_CU_FILE_SOURCE_ROOTS: {exc}") from exc
