"""The platform warehouse of the global catalog modes: made by the registry at start, and
how users reach it.

Its id is fixed, so every start (and every replica) finds the same one: an existing row
is kept; in global-rest the catalog's warehouse of that name is adopted if an earlier start
made it and did not get to write the row. Its owner is catalog_map.platform.PLATFORM_OWNER,
which is no user. Every user may write executions into it; which executions a user reads
is the ledger's business (only its own, see catalog_modes).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from pyiceberg.catalog.sql import SqlCatalog

from catalog_map.platform import PlatformWarehouseSettings
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2
from warehouse_service.store import warehouse_records
from warehouse_service.store.db import Connection, Record

log = logging.getLogger("warehouse_service.platform_warehouse")

#: The platform warehouse's id, the same in every deployment (there is one per deployment).
PLATFORM_WAREHOUSE_ID = uuid.UUID("9d3c54f2-1f0e-4c55-8a0b-6f1f6c0a7e11")
#: The request id it is created with, which makes creating it again a replay.
PLATFORM_REQUEST_ID = str(PLATFORM_WAREHOUSE_ID)
DISPLAY_NAME = "platform"


def create_request(
    settings: PlatformWarehouseSettings,
) -> warehouse_service_pb2.CreateWarehouseRequest:
    """The platform warehouse as a CreateWarehouseRequest, from the settings."""
    sts = bool(settings.platform_sts_role_arn)
    return warehouse_service_pb2.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name=DISPLAY_NAME,
            storage=warehouse_pb2.S3StorageProfile(
                bucket=settings.platform_bucket,
                key_prefix=settings.platform_key_prefix.strip("/"),
                region=settings.platform_region,
                endpoint=settings.platform_endpoint,
                path_style_access=settings.platform_path_style_access,
                flavor=(
                    warehouse_pb2.S3_FLAVOR_S3_COMPAT
                    if settings.platform_endpoint
                    else warehouse_pb2.S3_FLAVOR_AWS
                ),
                sts_enabled=sts,
                sts_role_arn=settings.platform_sts_role_arn,
            ),
        ),
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=settings.platform_access_key_id,
            secret_access_key=settings.platform_secret_access_key,
        ),
        request_id=PLATFORM_REQUEST_ID,
    )


async def prepare_sql_catalog(settings: PlatformWarehouseSettings) -> None:
    """Creates the SQL catalog's own tables now, so that units and readers, opening it at
    once, do not race to create them."""
    warehouse = settings.sql_warehouse()
    assert warehouse is not None

    def create() -> None:
        catalog = SqlCatalog(
            DISPLAY_NAME, uri=warehouse.uri, warehouse=warehouse.warehouse_location
        )
        catalog.engine.dispose()

    await asyncio.to_thread(create)
    log.info("SQL catalog ready", extra={"warehouse": warehouse.warehouse_location})


async def platform_row(connection: Connection, *, lock: bool = False) -> Record | None:
    """The platform warehouse's row (locked FOR SHARE with lock, as per-user binds lock theirs);
    None before it is made."""
    return await warehouse_records.warehouse(connection, PLATFORM_WAREHOUSE_ID, lock=lock)
