"""Outbound TLS settings shared by the registry, the computing units and the result service:
how they verify the catalog (its management, REST and token endpoints) and object storage.

By default both are verified against the default trust store, and an https:// endpoint is
always verified; CATALOG_TLS_VERIFY=false turns the catalog's verification off, with a
WARNING at start. Storage's CA bundle reaches Spark tasks as a FileIO property (a path)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from lake_tables.io_properties import S3_CA_BUNDLE
from service_runtime.config import ENV_PREFIX, ConfigError, Settings, setting
from service_runtime.outbound_tls import ServerTrust


@dataclass(frozen=True, repr=False)
class OutboundTlsSettings(Settings):
    catalog_ca_file: str = setting(
        "CATALOG_CA_FILE",
        "",
        "CA bundle (PEM file) that the catalog's HTTPS certificates (management API, REST "
        "API, token endpoint) are verified against; empty: the default trust store.",
    )
    catalog_tls_verify: bool = setting(
        "CATALOG_TLS_VERIFY",
        True,
        "Verify the catalog's HTTPS certificates; false accepts any (logged as a WARNING at "
        "start), for debugging only.",
    )
    storage_ca_file: str = setting(
        "STORAGE_CA_FILE",
        "",
        "CA bundle (PEM file) that object storage's (S3) HTTPS certificates are verified "
        "against, by every service and Spark task; empty: the system's trust store. The file "
        "must exist at that path wherever Spark tasks run.",
    )

    def catalog_trust(self) -> ServerTrust:
        """How the catalog's certificates are verified; warns if they are not."""
        _readable("CATALOG_CA_FILE", self.catalog_ca_file)
        trust = ServerTrust(self.catalog_ca_file, self.catalog_tls_verify)
        trust.warn_if_unverified("the catalog", f"{ENV_PREFIX}CATALOG_TLS_VERIFY")
        return trust

    def storage_io_properties(self) -> dict[str, str]:
        """FileIO properties that make S3 clients verify storage against its CA bundle."""
        _readable("STORAGE_CA_FILE", self.storage_ca_file)
        return {S3_CA_BUNDLE: self.storage_ca_file} if self.storage_ca_file else {}


def _readable(name: str, path: str) -> None:
    if path and not os.access(path, os.R_OK):
        raise ConfigError(f"{ENV_PREFIX}{name}: cannot read {path}")
