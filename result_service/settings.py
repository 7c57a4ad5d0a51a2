"""Settings of the result service (see service_runtime.config)."""

from __future__ import annotations

from dataclasses import dataclass

from catalog_map.settings import WarehouseClientSettings
from service_runtime.config import ConfigError, page_token_key_setting, setting


@dataclass(frozen=True, repr=False)
class ResultServiceSettings(WarehouseClientSettings):
    scope = "RESULT"
    port: int = setting("PORT", 50053, "gRPC port of the result service.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 9453, "Metrics port of the result service; 0 turns it off.", scoped=True
    )
    page_token_key: str = page_token_key_setting()
    stream_message_bytes: int = setting(
        "STREAM_MESSAGE_BYTES",
        2 * 1024 * 1024,
        "Largest Arrow payload of one StreamResult message; batches are cut to fit.",
        scoped=True,
    )
    max_page_bytes: int = setting(
        "MAX_PAGE_BYTES",
        3 * 1024 * 1024,
        "Largest encoded rows of one page (results, statistics, console messages): a page ends "
        "early, with a next_page_token, where its rows would pass it. Below gRPC clients' "
        "default 4 MiB receive limit.",
        scoped=True,
    )
    read_ahead_files: int = setting(
        "READ_AHEAD_FILES",
        2,
        "Data files a stream reads at once, ahead of the one it sends (memory grows with it).",
        scoped=True,
    )
    read_threads: int = setting(
        "READ_THREADS",
        16,
        "Threads for the catalog and storage work of pages and listings (streams have their own).",
        scoped=True,
    )
    max_streams: int = setting(
        "MAX_STREAMS",
        64,
        "StreamResult calls served at once; more are refused with RESOURCE_EXHAUSTED.",
        scoped=True,
    )
    plan_cache_size: int = setting(
        "PLAN_CACHE_SIZE",
        256,
        "Scan plans (the ordered data files of one snapshot and filter) kept for paging.",
        scoped=True,
    )
    visibility_recheck_seconds: float = setting(
        "VISIBILITY_RECHECK_SECONDS",
        1.0,
        "How often a stream of a running execution asks the registry whether its rows may "
        "still be seen (it stops once the execution failed or was cancelled).",
        scoped=True,
    )

    def validate(self) -> None:
        super().validate()
        self.require_secret_length("page_token_key")
        if self.max_page_bytes < 64 * 1024:
            raise ConfigError("TEXERA_LAKE_RESULT_MAX_PAGE_BYTES must be at least 64 KiB")
        if self.stream_message_bytes < 64 * 1024:
            raise ConfigError("TEXERA_LAKE_RESULT_STREAM_MESSAGE_BYTES must be at least 64 KiB")
        if not 1 <= self.read_ahead_files <= 16:
            raise ConfigError("TEXERA_LAKE_RESULT_READ_AHEAD_FILES must be 1 to 16")
        if self.read_threads < 1 or self.max_streams < 1:
            raise ConfigError(
                "TEXERA_LAKE_RESULT_READ_THREADS and TEXERA_LAKE_RESULT_MAX_STREAMS must be at least 1"
            )
        if not 0 < self.visibility_recheck_seconds <= 60:
            raise ConfigError(
                "TEXERA_LAKE_RESULT_VISIBILITY_RECHECK_SECONDS must be more than 0 and at most 60"
            )
