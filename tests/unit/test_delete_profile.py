"""The delete profile the registry creates warehouses with, and sets to hard before a purge."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from service_runtime.config import ConfigError
from tests.loopback_http import served
from texera.lake.v1 import warehouse_pb2
from warehouse_service.catalog import delete_profile
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.settings import WarehouseServiceSettings


@pytest.mark.parametrize(
    ("text", "profile"),
    [
        ("hard", {"type": "hard"}),
        ("soft:3600", {"type": "soft", "expiration-seconds": 3600}),
    ],
)
def test_a_setting_names_a_lakekeeper_profile(text: str, profile: dict[str, Any]) -> None:
    assert delete_profile.parse(text) == profile


@pytest.mark.parametrize("text", ["", "soft", "soft:0", "soft:-5", "soft:1h", "hard:5", "gone"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="'hard' or 'soft:<seconds>'"):
        delete_profile.parse(text)


def test_the_registry_refuses_to_start_with_a_bad_profile() -> None:
    settings = WarehouseServiceSettings.from_env(
        {
            "TEXERA_LAKE_CATALOG_DELETE_PROFILE": "soft:never",
            "TEXERA_LAKE_WAREHOUSE_PLAINTEXT": "true",
        }
    )
    with pytest.raises(ConfigError, match="CATALOG_DELETE_PROFILE"):
        settings.validate()


async def test_warehouses_are_created_with_the_profile_and_purges_set_it_hard() -> None:
    bodies: dict[str, Any] = {}

    async def record(request: web.Request) -> web.Response:
        bodies[request.path] = await request.json()
        return web.json_response({"warehouse-id": "w-1"}, status=201)

    app = web.Application()
    app.router.add_post("/management/v1/warehouse", record)
    app.router.add_post("/management/v1/warehouse/{id}/delete-profile", record)
    async with served(app) as base:
        client = CatalogClient(
            f"{base}/management",
            f"{base}/catalog",
            "project",
            delete_profile=delete_profile.parse("soft:600"),
        )
        await client.open()
        try:
            await client.create_warehouse(
                "texera-w",
                warehouse_pb2.S3StorageProfile(bucket="b", region="r"),
                warehouse_pb2.S3Credentials(access_key_id="a", secret_access_key="s" * 20),
            )
            await client.set_delete_profile("w-1", delete_profile.HARD)
        finally:
            await client.close()
    created = bodies["/management/v1/warehouse"]
    assert created["delete-profile"] == {"type": "soft", "expiration-seconds": 600}
    assert bodies["/management/v1/warehouse/w-1/delete-profile"] == {
        "delete-profile": {"type": "hard"}
    }
