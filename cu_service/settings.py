"""Settings of a computing unit (see service_runtime.config)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from catalog_map.settings import WarehouseClientSettings
from service_runtime.config import ConfigError, setting


@dataclass(frozen=True, repr=False)
class ComputingUnitSettings(WarehouseClientSettings):
    scope = "CU"
    port: int = setting("PORT", 50052, "gRPC port of the computing unit.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9452, "Metrics port of the computing unit; 0 turns it off.", scoped=True
    )
    unit_id: str = setting(
        "ID", "", "Identifier of this computing unit. Empty means cu-<host name>.", scoped=True
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
        "Spark master URL: local[*], or a cluster's master.",
        scoped=True,
    )
    spark_driver_memory: str = setting(
        "SPARK_DRIVER_MEMORY", "2g", "Memory of the Spark driver JVM.", scoped=True
    )
    capacity: int = setting(
        "CAPACITY", 2, "Executions run at once; more wait, queued in order.", scoped=True
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
    credential: str = setting(
        "CREDENTIAL",
        "",
        "The unit's own credential, issued by the registry when it launched the unit. Required.",
        secret=True,
        scoped=True,
    )
    telemetry_interval_seconds: float = setting(
        "TELEMETRY_INTERVAL_SECONDS",
        10.0,
        "How often runtime statistics and console messages are appended to their tables.",
        scoped=True,
    )

    @property
    def computing_unit_id(self) -> str:
        return self.unit_id or f"cu-{socket.gethostname()}"[:64]

    def address(self, bound_port: int) -> str:
        return self.advertised_address or f"{self.host}:{bound_port}"

    def validate(self) -> None:
        super().validate()
        self.require("credential")
        if not 1 <= self.capacity <= 1000:
            raise ConfigError("TEXERA_LAKE_CU_CAPACITY must be 1 to 1000")
        if self.target_file_size_bytes < 1024 * 1024:
            raise ConfigError("TEXERA_LAKE_CU_TARGET_FILE_SIZE_BYTES must be at least 1 MiB")
