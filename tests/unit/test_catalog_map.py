"""The per-warehouse catalog map: reuse, isolation of slow or failing warehouses, bounds."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from catalog_map.cache import CatalogMap, catalog_unavailable
from catalog_map.catalog_token import CatalogToken
from texera.lake.internal.v1 import registry_service_pb2


@dataclass
class FakeCatalog:
    """Stands in for a pyiceberg catalog: only the map's own behaviour is under test."""

    warehouse_id: str
    version: int
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class Builder:
    builds: list[str] = field(default_factory=list)
    gates: dict[str, threading.Event] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)

    tokens: list[CatalogToken] = field(default_factory=list)

    def __call__(self, binding: registry_service_pb2.CatalogBinding, token: CatalogToken) -> Any:
        self.tokens.append(token)
        gate = self.gates.get(binding.warehouse_id)
        if gate is not None:
            assert gate.wait(10)
        self.builds.append(binding.warehouse_id)
        if binding.warehouse_id in self.failing:
            raise ConnectionError(f"catalog of {binding.warehouse_id} is down")
        return FakeCatalog(binding.warehouse_id, binding.credential_version)


def binding(warehouse_id: str, version: int = 1) -> registry_service_pb2.CatalogBinding:
    return registry_service_pb2.CatalogBinding(
        warehouse_id=warehouse_id, credential_version=version
    )


async def resolve(warehouse_id: str) -> registry_service_pb2.CatalogBinding:
    return binding(warehouse_id)


async def test_concurrent_misses_build_once_and_hits_reuse() -> None:
    builder = Builder()
    catalogs = CatalogMap(resolve, builder)
    results = await asyncio.gather(*(catalogs.get("w1") for _ in range(10)))
    assert builder.builds == ["w1"]
    assert all(result is results[0] for result in results)
    assert await catalogs.get("w1") is results[0]


async def test_a_slow_warehouse_does_not_hold_up_another() -> None:
    builder = Builder(gates={"slow": threading.Event()})
    catalogs = CatalogMap(resolve, builder)
    slow = asyncio.ensure_future(catalogs.get("slow"))
    await asyncio.sleep(0.05)
    fast = await asyncio.wait_for(catalogs.get("fast"), timeout=5)
    assert fast.warehouse_id == "fast"  # type: ignore[attr-defined]
    assert not slow.done()
    builder.gates["slow"].set()
    assert (await slow).warehouse_id == "slow"  # type: ignore[attr-defined]
    assert builder.builds == ["fast", "slow"]


async def test_a_failing_warehouse_fails_alone_and_is_retried_later() -> None:
    builder = Builder(failing={"down"})
    catalogs = CatalogMap(resolve, builder)
    healthy = await catalogs.get("up")
    with pytest.raises(ConnectionError):
        await catalogs.get("down")
    assert await catalogs.get("up") is healthy
    builder.failing.clear()
    assert (await catalogs.get("down")).warehouse_id == "down"  # type: ignore[attr-defined]
    assert builder.builds.count("down") == 2


async def test_a_new_credential_version_replaces_and_closes_the_old_catalog() -> None:
    catalogs = CatalogMap(resolve, Builder())
    old = await catalogs.get("w", binding("w", 1))
    assert await catalogs.get("w", binding("w", 1)) is old
    new = await catalogs.get("w", binding("w", 2))
    assert new is not old
    assert old.closed  # type: ignore[attr-defined]
    assert new.version == 2  # type: ignore[attr-defined]


async def test_least_recently_used_entries_are_evicted_and_closed() -> None:
    catalogs = CatalogMap(resolve, Builder(), max_entries=2)
    first = await catalogs.get("a")
    await catalogs.get("b")
    await catalogs.get("a")  # a is now the most recently used
    await catalogs.get("c")
    assert len(catalogs) == 2
    assert not first.closed  # type: ignore[attr-defined]
    assert (await catalogs.get("a")) is first


async def test_idle_entries_expire_and_are_closed() -> None:
    now = [0.0]
    catalogs = CatalogMap(resolve, Builder(), idle_seconds=60, clock=lambda: now[0])
    idle = await catalogs.get("idle")
    now[0] = 30
    busy = await catalogs.get("busy")
    now[0] = 70  # idle last used at 0, busy at 30
    assert await catalogs.get("busy") is busy
    assert idle.closed  # type: ignore[attr-defined]
    assert len(catalogs) == 1


async def test_a_build_that_hangs_times_out_without_blocking_others() -> None:
    builder = Builder(gates={"hung": threading.Event()})
    catalogs = CatalogMap(resolve, builder, build_timeout_seconds=0.3)
    with pytest.raises(TimeoutError):
        await catalogs.get("hung")
    assert (await catalogs.get("other")).warehouse_id == "other"  # type: ignore[attr-defined]
    builder.gates["hung"].set()


def with_token(warehouse_id: str, seconds_left: float) -> registry_service_pb2.CatalogBinding:
    tokened = binding(warehouse_id)
    tokened.catalog_token = "token-of-" + warehouse_id
    tokened.catalog_token_expire_time.FromNanoseconds(int((time.time() + seconds_left) * 1e9))
    return tokened


async def test_an_entry_outlives_its_catalog_token_which_is_renewed_in_place() -> None:
    builder, resolved = Builder(), []

    async def resolve_with_token(warehouse_id: str) -> registry_service_pb2.CatalogBinding:
        resolved.append(warehouse_id)
        renewed = with_token(warehouse_id, 3600 if resolved[1:] else 1.2)
        renewed.catalog_token = f"token-{len(resolved)}"
        return renewed

    catalogs = CatalogMap(resolve_with_token, builder)
    first = await catalogs.get("w1")
    (token,) = builder.tokens
    await asyncio.sleep(1.0)  # the token is due: a quarter of its 1.2 s is the margin
    assert token.current() == "token-1"  # on the loop's thread: as it is, never waiting
    assert resolved == ["w1"]
    # A catalog request, made on a thread: the token is renewed first, through the map's resolve.
    assert await asyncio.to_thread(token.current) == "token-2"
    assert resolved == ["w1", "w1"]
    assert await catalogs.get("w1") is first
    assert not first.closed  # type: ignore[attr-defined]
    assert builder.builds == ["w1"]


async def test_a_fresher_binding_a_caller_brings_renews_the_token() -> None:
    builder = Builder()
    catalogs = CatalogMap(resolve, builder)
    first = await catalogs.get("w1", with_token("w1", 60))
    fresher = with_token("w1", 600)
    fresher.catalog_token = "fresher"
    assert await catalogs.get("w1", fresher) is first
    assert builder.tokens[0].current() == "fresher"
    staler = with_token("w1", 120)
    await catalogs.get("w1", staler)
    assert builder.tokens[0].current() == "fresher"


async def test_a_binding_whose_token_is_spent_is_resolved_again() -> None:
    builder, resolved = Builder(), []

    async def resolve_with_token(warehouse_id: str) -> registry_service_pb2.CatalogBinding:
        resolved.append(warehouse_id)
        return with_token(warehouse_id, 3600)

    catalogs = CatalogMap(resolve_with_token, builder)
    await catalogs.get("w1", with_token("w1", 0.5))
    assert resolved == ["w1"]


def test_an_unavailable_catalog_is_named_with_its_cause_and_no_credential() -> None:
    cause = ConnectionError(
        "HTTPConnectionPool(host='catalog', port=8181): refused; Authorization: Bearer abc.def\n"
        "a second line that is left out"
    )
    error = catalog_unavailable("w1", cause)
    assert error.code == grpc.StatusCode.UNAVAILABLE
    assert "ConnectionError: HTTPConnectionPool(host='catalog', port=8181): refused" in str(error)
    assert "abc.def" not in str(error)
    assert "second line" not in str(error)
