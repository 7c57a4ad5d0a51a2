"""The registry through outages of its database and of the catalog, on a stack of its own."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import asyncpg
import grpc
import pytest

from embedded_stack.postgres import ensure_database
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from tests.conftest import TEST_STACK_ENV
from tests.integration.catalog_client import management, warehouse_request
from tests.integration.mesh import create_warehouse, refused, user
from texera.lake.v1 import warehouse_service_pb2
from warehouse_service.migrate import migrate, migrations
from warehouse_service.warehouses import catalog_name, derived_warehouse_id

pytestmark = pytest.mark.integration
ws = warehouse_service_pb2


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack these tests may break without disturbing the others."""
    settings = StackSettings(
        state_dir=str(tmp_path_factory.mktemp("resilience")), log_level="DEBUG"
    )
    env = {**TEST_STACK_ENV, "TEXERA_LAKE_WAREHOUSE_CATALOG_ATTEMPTS": "2"}
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def _catalog_names(stack: Stack) -> list[str]:
    answer = management(stack, "GET", "/warehouse", params=[("warehouseStatus", "active")]).json()
    return [w["name"] for w in answer["warehouses"]]


def test_database_restart_during_traffic_loses_and_duplicates_nothing(own_stack: Stack) -> None:
    stack = own_stack
    client = user(stack, f"traffic-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("traffic")
    request_ids = [str(uuid.uuid4()) for _ in range(10)]
    created: dict[str, str] = {}
    errors: list[grpc.StatusCode] = []
    started = threading.Event()

    def traffic() -> None:
        for index, request_id in enumerate(request_ids):
            while True:
                try:
                    warehouse = create_warehouse(
                        client, grant, key_prefix=f"t{index}", request_id=request_id
                    )
                    created[request_id] = warehouse.warehouse_id
                    break
                except grpc.RpcError as exc:
                    errors.append(exc.code())
                    time.sleep(0.3)  # a client retrying with the same request_id
            if index == 2:
                started.set()

    worker = threading.Thread(target=traffic)
    worker.start()
    assert started.wait(120)
    stack.interrupt("postgres")
    during = refused(
        lambda: client.call(client.warehouses.ListWarehouses, ws.ListWarehousesRequest())
    )
    assert during.code() == grpc.StatusCode.UNAVAILABLE
    time.sleep(2)
    stack.resume("postgres")
    worker.join(180)

    assert not worker.is_alive()
    stack.check_running()  # the registry never crashed
    assert set(errors) == {grpc.StatusCode.UNAVAILABLE}
    assert len(created) == len(request_ids)
    assert len(set(created.values())) == len(request_ids)
    listed = client.call(
        client.warehouses.ListWarehouses, ws.ListWarehousesRequest(page_size=100)
    ).warehouses
    assert sorted(w.warehouse_id for w in listed) == sorted(created.values())
    names = _catalog_names(stack)
    for warehouse_id in created.values():
        assert names.count(catalog_name(warehouse_id)) == 1


def test_catalog_outage_leaves_no_row_and_a_retry_creates_once(own_stack: Stack) -> None:
    stack = own_stack
    client = user(stack, f"outage-{uuid.uuid4().hex[:6]}")
    grant = stack.provision_bucket("outage")
    request_id = str(uuid.uuid4())
    stack.interrupt("dev-catalog")
    try:
        error = refused(lambda: create_warehouse(client, grant, request_id=request_id))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert not client.call(
            client.warehouses.ListWarehouses, ws.ListWarehousesRequest()
        ).warehouses
    finally:
        stack.resume("dev-catalog")
    warehouse = create_warehouse(client, grant, request_id=request_id)
    again = create_warehouse(client, grant, request_id=request_id)
    assert again.warehouse_id == warehouse.warehouse_id
    assert _catalog_names(stack).count(warehouse.catalog_warehouse_name) == 1


def test_a_warehouse_whose_answer_was_lost_is_adopted_not_duplicated(own_stack: Stack) -> None:
    stack = own_stack
    owner = f"lost-{uuid.uuid4().hex[:6]}"
    client = user(stack, owner)
    grant = stack.provision_bucket("lost")
    request_id = str(uuid.uuid4())
    name = catalog_name(derived_warehouse_id(owner, request_id))
    # The catalog created it, but the registry never heard back.
    earlier = management(stack, "POST", "/warehouse", json=warehouse_request(grant, name)).json()

    warehouse = create_warehouse(client, grant, request_id=request_id)
    assert warehouse.catalog_warehouse_id == earlier["id"]
    assert _catalog_names(stack).count(name) == 1


async def test_replicas_migrating_at_once_apply_each_migration_once(own_stack: Stack) -> None:
    url = ensure_database(own_stack.database_url, f"migrations_{uuid.uuid4().hex[:8]}")
    first, second = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        applied = await asyncio.gather(migrate(first), migrate(second))  # type: ignore[arg-type]
        versions = [version for version, _, _ in migrations()]
        assert sorted(applied[0] + applied[1]) == versions
        rows = await first.fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert [row["version"] for row in rows] == versions
    finally:
        await first.close()
        await second.close()
