"""The platform warehouse of the global catalog modes: its storage and, for `global-sql`, its
SQL catalog, as settings shared by the registry, the computing units and the result service.

In `global-rest` only the registry uses them (it creates the warehouse in the REST catalog,
which then vends credentials as for any warehouse). In `global-sql` there is no catalog
service to vend anything: computing units and the result service open pyiceberg's SqlCatalog
themselves, so they hold the catalog database's URL and the bucket's key, both as secret files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from service_runtime.config import Settings, setting

#: The owner of the platform warehouse: no user, so no user's rights follow from owning it.
PLATFORM_OWNER = ""


@dataclass(frozen=True)
class SqlWarehouse:
    """The deployment's single global warehouse on a SQL catalog (the `sql` backend)."""

    uri: str = field(repr=False)
    warehouse_location: str
    file_io_properties: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, repr=False)
class PlatformWarehouseSettings(Settings):
    platform_bucket: str = setting(
        "PLATFORM_BUCKET",
        "",
        "Bucket of the platform warehouse (global catalog modes). Required there.",
    )
    platform_key_prefix: str = setting(
        "PLATFORM_KEY_PREFIX", "lake", "Key prefix of the platform warehouse in its bucket."
    )
    platform_region: str = setting(
        "PLATFORM_REGION", "us-east-1", "Region of the platform warehouse's bucket."
    )
    platform_endpoint: str = setting(
        "PLATFORM_ENDPOINT",
        "",
        "S3 endpoint (http(s)://host:port) of the platform warehouse's bucket; empty means "
        "AWS's for the region. The operator's choice, so it may be an internal address.",
    )
    platform_path_style_access: bool = setting(
        "PLATFORM_PATH_STYLE_ACCESS",
        False,
        "Address the platform bucket by path (most S3-compatible stores want this).",
    )
    platform_sts_role_arn: str = setting(
        "PLATFORM_STS_ROLE_ARN",
        "",
        "global-rest: role the catalog assumes (STS) to vend table-scoped credentials of the "
        "platform warehouse; empty vends none (then S3-compatible stores need STS off).",
    )
    platform_access_key_id: str = setting(
        "PLATFORM_ACCESS_KEY_ID",
        "",
        "Access key id of the platform warehouse's bucket. Required in global modes.",
        secret=True,
    )
    platform_secret_access_key: str = setting(
        "PLATFORM_SECRET_ACCESS_KEY",
        "",
        "Secret access key of the platform warehouse's bucket. Required in global modes.",
        secret=True,
    )
    sql_catalog_url: str = setting(
        "SQL_CATALOG_URL",
        "",
        "global-sql: SQLAlchemy URL of the catalog's PostgreSQL database "
        "(postgresql+psycopg2://user:password@host:port/db); use a database and role of its "
        "own, never the registry's.",
        secret=True,
    )

    @property
    def platform_location(self) -> str:
        prefix = self.platform_key_prefix.strip("/")
        return f"s3://{self.platform_bucket}/{prefix}" if prefix else f"s3://{self.platform_bucket}"

    def sql_catalog_secrets(self) -> dict[str, str]:
        """The secrets a computing unit needs to open the global-sql warehouse, by variable."""
        return {
            PlatformWarehouseSettings.variable_name(f): getattr(self, f.name)
            for f in dataclasses.fields(PlatformWarehouseSettings)
            if f.metadata["secret"]
        }

    def sql_warehouse(self) -> SqlWarehouse | None:
        """The global-sql warehouse; None where no SQL catalog is configured."""
        if not self.sql_catalog_url:
            return None
        io = {
            "s3.region": self.platform_region,
            "s3.access-key-id": self.platform_access_key_id,
            "s3.secret-access-key": self.platform_secret_access_key,
            "s3.path-style-access": str(self.platform_path_style_access).lower(),
        }
        if self.platform_endpoint:
            io["s3.endpoint"] = self.platform_endpoint
        return SqlWarehouse(self.sql_catalog_url, self.platform_location, io)
